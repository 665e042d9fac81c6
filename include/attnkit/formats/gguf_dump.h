#pragma once
// What `attnkit gguf FILE` prints: a GGUF file's metadata and tensor table, laid out as the gguf
// package's gguf_dump script (gguf/scripts/gguf_dump.py, 0.19.0) prints them. No LibTorch.
#include "attnkit/formats/gguf.h"

#include <string>

namespace attnkit::formats {

// gguf_dump's text: "* Dumping N key/value pair(s)" (the three header fields GGUF.version,
// GGUF.tensor_count, GGUF.kv_count first, as gguf_dump counts them), one line per key
//   "  {n:5}: {type:10} | {count:8} | KEY = VALUE"
// with VALUE as Python's repr (strings cut to 57 characters + "...", arrays to their first 6
// values + ", ...]"; nested arrays flattened, as gguf_dump shows them), then
// "* Dumping M tensor(s)" and one line per tensor
//   "  {n:5}: {elements:10} | {d0:5}, {d1:5}, {d2:5}, {d3:5} | {type:7} | {bytes:10} | NAME"
// (gguf_dump's columns with the tensor's bytes added before the name). The first line gives the
// version, alignment and data section. Differences from Python's repr: a string that is not
// UTF-8 has its bad bytes written as \xNN (gguf_dump fails), and non-ASCII characters other than
// U+0080..U+009F are written as they are (Python escapes the unprintable ones).
std::string gguf_dump_text(const GgufFile& file);

// gguf_dump --json --json-array's object {"filename", "endian", "metadata": {KEY: {"index",
// "type", "offset", "value"[, "array_types"]}}, "tensors": {NAME: {"index", "shape", "type",
// "offset"}}} (offsets of the records in the file; shapes in ggml order), with arrays nested as in
// the file (gguf_dump flattens arrays of arrays) and these additions: "version", "alignment",
// "data_offset" at the top, and "elements", "bytes", "data_offset" (absolute) per tensor. Bytes
// that are not UTF-8 become U+FFFD.
std::string gguf_dump_json(const GgufFile& file);

}  // namespace attnkit::formats
