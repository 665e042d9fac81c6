#!/usr/bin/python3
"""attnkit's GGUF reader (src/formats/) against the `gguf` Python package (0.19.0, llama.cpp's
gguf-py; the held-out peer):
  - conversion to float32 of every ggml type, bit for bit against gguf.quants.dequantize: tensors
    that gguf.quants.quantize made from random data (every type it can quantize), and random bytes
    (every type: random scales, NaN and infinity included; NaNs compared as NaN, not by payload).
    Q8_K, F64 and the integer types, which the package does not convert, against numpy's float32
    arithmetic on the block layout; the types attnkit does not convert give one error line naming
    the tensor and the type;
  - metadata and tensor infos of a file gguf.GGUFWriter writes (every value type, nested arrays,
    custom alignment) against gguf.GGUFReader, and the text and JSON dumps against the package's
    gguf_dump script (attnkit_gguf_probe, and `attnkit gguf` when build/attnkit has it);
  - the real files scripts/setup.sh fetches (SmolLM2-135M-Instruct, Gemma 3 270M): every tensor
    bit for bit and every metadata value; skipped with a message when they are absent.

ctest runs this file with /usr/bin/python3; it re-runs itself with the test venv's python."""
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

import runner

runner.run_in_peer_venv("gguf")

import numpy as np  # noqa: E402
import gguf  # noqa: E402
from gguf import GGMLQuantizationType as T  # noqa: E402
from gguf.constants import GGML_QUANT_SIZES  # noqa: E402

BUILD_DIR = "build"
WEIGHTS = os.path.join(os.environ.get("ATTNKIT_CACHE", os.path.expanduser("~/.cache/attnkit")), "weights")
REAL_FILES = ["smollm2-135m-instruct.gguf", "gemma-3-270m-q4_k_m.gguf"]
SUPPORTED = {T.F32, T.F16, T.BF16, T.F64, T.I8, T.I16, T.I32, T.I64, T.Q4_0, T.Q4_1, T.Q5_0,
             T.Q5_1, T.Q8_0, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.Q8_K}
NUMPY_TYPES = {T.F64: np.float64, T.I8: np.int8, T.I16: np.int16, T.I32: np.int32, T.I64: np.int64}


def probe(path, *options):
    p = subprocess.run([os.path.join(BUILD_DIR, "attnkit_gguf_probe"), path, *options],
                       capture_output=True, timeout=600)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


def probe_tensors(path):
    """attnkit's conversion of every tensor of `path`: a list of float32 arrays or error strings."""
    code, out, err = probe(path, "--tensors")
    if code != 0:
        raise AssertionError(f"attnkit_gguf_probe --tensors failed: {err}")
    frames, at = [], 0
    while at < len(out):
        kind, size = out[at:at + 1], struct.unpack_from("<Q", out, at + 1)[0]
        payload = out[at + 9:at + 9 + size]
        at += 9 + size
        frames.append(np.frombuffer(payload, dtype=np.float32) if kind == b"F" else payload.decode())
    return frames


def reference(tensor):
    """float32 values of a GGUFReader tensor, flat, as the package (or numpy) computes them."""
    qtype = tensor.tensor_type
    if qtype == T.Q8_K:  # block_q8_K: float d, int8 qs[256], int16 bsums[16]; value = d * q
        blocks = np.ascontiguousarray(tensor.data).view(np.uint8).reshape(-1, 292)
        d = blocks[:, :4].copy().view(np.float32)
        q = blocks[:, 4:260].copy().view(np.int8).astype(np.float32)
        return (d * q).reshape(-1)
    if qtype in NUMPY_TYPES:
        return np.asarray(tensor.data).astype(np.float32).reshape(-1)
    return gguf.quants.dequantize(tensor.data, qtype).reshape(-1)


class Case(unittest.TestCase):
    def assert_same_floats(self, ours, expected, what):
        self.assertIsInstance(ours, np.ndarray, f"{what}: {ours}")
        expected = np.asarray(expected, dtype=np.float32).reshape(-1)
        self.assertEqual(ours.shape, expected.shape, what)
        nan_ours, nan_expected = np.isnan(ours), np.isnan(expected)
        self.assertTrue((nan_ours == nan_expected).all(), f"{what}: NaN at different places")
        differ = np.flatnonzero((ours.view(np.uint32) != expected.view(np.uint32)) & ~nan_ours)
        self.assertEqual(len(differ), 0, f"{what}: {len(differ)} of {ours.size} values differ, e.g. "
                         f"at {differ[:3]}: {ours[differ[:3]]} vs {expected[differ[:3]]}")

    def check_every_tensor(self, path, reader=None):
        """Every tensor of `path` converted by attnkit equals the reference; returns the types seen."""
        reader = reader or gguf.GGUFReader(path)
        frames = probe_tensors(path)
        self.assertEqual(len(frames), len(reader.tensors))
        seen = set()
        for tensor, ours in zip(reader.tensors, frames):
            what = f"{os.path.basename(path)}: {tensor.name} ({tensor.tensor_type.name})"
            seen.add(tensor.tensor_type)
            if tensor.tensor_type in SUPPORTED:
                self.assert_same_floats(ours, reference(tensor), what)
            else:
                self.assertIsInstance(ours, str, what)
                self.assertIn(f"cannot convert tensor '{tensor.name}' of {path}: ggml type "
                              f"{tensor.tensor_type.name} is not supported", ours)
                self.assertNotIn("\n", ours)
        return seen

    def compare_with_reader(self, path, ours, reader=None):
        """attnkit's JSON dump `ours` against gguf.GGUFReader's fields and tensors."""
        reader = reader or gguf.GGUFReader(path)
        self.assertEqual(list(reader.fields), [k for k, _ in sorted(ours["metadata"].items(),
                                                                     key=lambda kv: kv[1]["index"])])
        for name, field in reader.fields.items():
            item = ours["metadata"][name]
            self.assertEqual(item["type"], field.types[0].name, name)
            self.assertEqual(item["offset"], field.offset, name)
            value = item["value"]
            if field.types[0] == gguf.GGUFValueType.ARRAY:
                self.assertEqual(item["array_types"], [t.name for t in field.types[1:]], name)
                value = flatten(value)
            self.assertEqual(value, field.contents(), name)
        self.assertEqual(ours["data_offset"], reader.data_offset)
        self.assertEqual(ours["alignment"], reader.alignment)
        self.assertEqual(len(ours["tensors"]), len(reader.tensors))
        for index, tensor in enumerate(reader.tensors):
            item = ours["tensors"][tensor.name]
            self.assertEqual(item["index"], index)
            self.assertEqual(item["shape"], tensor.shape.tolist(), tensor.name)
            self.assertEqual(item["type"], tensor.tensor_type.name, tensor.name)
            self.assertEqual(item["offset"], tensor.field.offset, tensor.name)
            self.assertEqual(item["elements"], tensor.n_elements, tensor.name)
            self.assertEqual(item["bytes"], tensor.n_bytes, tensor.name)
            self.assertEqual(item["data_offset"], tensor.data_offset, tensor.name)


class Conversions(Case):
    def test_quantized_random_data(self):
        """Every type gguf.quants.quantize makes, from random rows (one of zeros, one spiky)."""
        rng = np.random.default_rng(42)
        data = rng.standard_normal((5, 1024)).astype(np.float32)
        data[1] = 0
        data[2] *= np.where(rng.random(1024) < 0.01, 1000, 0.001).astype(np.float32)
        quantized = []
        for qtype in T:
            try:
                quantized.append((qtype, gguf.quants.quantize(data, qtype)))
            except NotImplementedError:
                pass
        names = {q.name for q, _ in quantized}
        for required in ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"]:
            self.assertIn(required, names)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "quantized.gguf")
            writer = gguf.GGUFWriter(path, "llama")
            for qtype, values in quantized:
                raw = None if qtype in (T.F32, T.F16) else qtype
                writer.add_tensor(f"t.{qtype.name}", values, raw_dtype=raw)
            write(writer)
            seen = self.check_every_tensor(path)
        self.assertEqual(seen, {q for q, _ in quantized})
        print(f"quantized by gguf: {', '.join(sorted(names))}", file=sys.stderr)

    def test_random_bytes_of_every_type(self):
        """Random blocks of every ggml type (three rows of two blocks), plain types as numpy makes them."""
        rng = np.random.default_rng(7)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "random.gguf")
            writer = gguf.GGUFWriter(path, "llama")
            for qtype, (block_size, block_bytes) in GGML_QUANT_SIZES.items():
                raw = rng.integers(0, 256, size=(3, 2 * block_bytes), dtype=np.uint8)
                if qtype in NUMPY_TYPES:
                    writer.add_tensor(f"t.{qtype.name}", raw.view(NUMPY_TYPES[qtype]))
                else:
                    writer.add_tensor(f"t.{qtype.name}", raw, raw_dtype=qtype)
            write(writer)
            seen = self.check_every_tensor(path)
        self.assertEqual(seen, set(GGML_QUANT_SIZES))
        self.assertTrue(SUPPORTED <= seen)


def write(writer):
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def metadata_file(path, alignment=None):
    """A file with every metadata value type, nested arrays and a few tensors."""
    writer = gguf.GGUFWriter(path, "llama")
    if alignment:
        writer.add_custom_alignment(alignment)
    V = gguf.GGUFValueType
    writer.add_key_value("t.u8", 200, V.UINT8)
    writer.add_key_value("t.i8", -100, V.INT8)
    writer.add_key_value("t.u16", 65000, V.UINT16)
    writer.add_key_value("t.i16", -30000, V.INT16)
    writer.add_key_value("t.u32", 4000000000, V.UINT32)
    writer.add_key_value("t.i32", -2000000000, V.INT32)
    writer.add_key_value("t.u64", 2**64 - 1, V.UINT64)
    writer.add_key_value("t.i64", -2**63, V.INT64)
    writer.add_key_value("t.f32", 1e-5, V.FLOAT32)
    writer.add_key_value("t.f32b", 100000.0, V.FLOAT32)
    writer.add_key_value("t.f32c", -3.5e20, V.FLOAT32)
    writer.add_key_value("t.f64", 0.1, V.FLOAT64)
    writer.add_key_value("t.bool", True, V.BOOL)
    writer.add_key_value("t.bool2", False, V.BOOL)
    writer.add_string("t.string", "Gemma's \"quotes\" and \\ backslash\ttab")
    writer.add_string("t.long", "ünïcödé " * 12)
    writer.add_string("t.quote", "it's")
    writer.add_array("t.strings", ["<s>", "▁the", "Ġworld", "a\nb", "", "x", "y", "z"])
    writer.add_array("t.ints", list(range(-3, 9)))
    writer.add_key_value("t.u8s", [1, 2, 255], V.ARRAY, sub_type=V.UINT8)
    writer.add_key_value("t.f32s", [0.5, -1.25, 3.0], V.ARRAY, sub_type=V.FLOAT32)
    writer.add_key_value("t.bools", [True, False, True], V.ARRAY, sub_type=V.BOOL)
    writer.add_array("t.nested", [[1, 2, 3], [4], [5, 6, 7, 8]])
    writer.add_array("t.nested_strings", [["a", "b"], ["c"]])
    rng = np.random.default_rng(3)
    writer.add_tensor("token_embd.weight", rng.standard_normal((16, 64)).astype(np.float16))
    writer.add_tensor("blk.0.attn_q.weight",
                      gguf.quants.quantize(rng.standard_normal((2, 3, 64)).astype(np.float32), T.Q8_0),
                      raw_dtype=T.Q8_0)
    writer.add_tensor("output_norm.weight", rng.standard_normal(64).astype(np.float32))
    write(writer)


def flatten(value):
    if isinstance(value, list):
        return [leaf for item in value for leaf in flatten(item)]
    return [value]


def gguf_dump(*args):
    p = subprocess.run([sys.executable, "-m", "gguf.scripts.gguf_dump", *args],
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise AssertionError(f"gguf_dump failed: {p.stderr}")
    return p.stdout


class Metadata(Case):
    def compare_with_gguf_dump(self, path, text, as_json):
        """attnkit's text and JSON dumps against gguf_dump's: the same lines (ours with a bytes
        column added to the tensor table) and the same JSON fields."""
        theirs = gguf_dump(path).splitlines()
        ours = text.splitlines()
        start = next(i for i, line in enumerate(theirs) if line.startswith("* Dumping"))
        self.assertTrue(ours[0].startswith("* GGUF version "), ours[0])
        ours = ours[1:]
        self.assertEqual(len(ours), len(theirs) - start)
        in_tensors = False
        for mine, reference_line in zip(ours, theirs[start:]):
            if mine.startswith("* Dumping") and "tensor" in mine:
                in_tensors = True
            if in_tensors and not mine.startswith("*"):
                columns = mine.split(" | ")
                mine = " | ".join(columns[:3] + columns[4:])
            self.assertEqual(mine, reference_line)
        reference_json = json.loads(gguf_dump("--json", "--json-array", path))
        self.assertEqual(as_json["filename"], reference_json["filename"])
        self.assertEqual(as_json["endian"], reference_json["endian"])
        for key, item in reference_json["metadata"].items():
            mine = dict(as_json["metadata"][key])
            if "array_types" in mine:
                mine["value"] = flatten(mine["value"])
                del mine["element_type"]
            self.assertEqual(mine, item, key)
        for name, item in reference_json["tensors"].items():
            mine = {k: as_json["tensors"][name][k] for k in item}
            self.assertEqual(mine, item, name)

    def test_generated_file(self):
        for alignment in (None, 64):
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "metadata.gguf")
                metadata_file(path, alignment)
                code, out, err = probe(path)
                self.assertEqual(code, 0, err)
                ours = json.loads(out)
                self.compare_with_reader(path, ours)
                code, text, err = probe(path, "--text")
                self.assertEqual(code, 0, err)
                self.compare_with_gguf_dump(path, text.decode(), ours)
                self.check_every_tensor(path)

    def test_cli(self):
        """`attnkit gguf FILE [--json]` prints what gguf_dump prints."""
        attnkit = os.path.join(BUILD_DIR, "attnkit")
        self.assertTrue(os.path.exists(attnkit), f"{attnkit} is missing: build attnkit_cli")
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "metadata.gguf")
            metadata_file(path)
            text = subprocess.run([attnkit, "gguf", path], capture_output=True, text=True, timeout=120)
            self.assertEqual(text.returncode, 0, text.stderr)
            as_json = subprocess.run([attnkit, "gguf", path, "--json"], capture_output=True, text=True,
                                     timeout=120)
            self.assertEqual(as_json.returncode, 0, as_json.stderr)
            self.compare_with_gguf_dump(path, text.stdout, json.loads(as_json.stdout))
            bad = os.path.join(tmp, "bad.gguf")
            with open(path, "rb") as f, open(bad, "wb") as g:
                g.write(f.read()[:100])
            p = subprocess.run([attnkit, "gguf", bad], capture_output=True, text=True, timeout=120)
            self.assertNotEqual(p.returncode, 0)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
            self.assertIn(bad, p.stderr)

    def test_big_endian_refused(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "big.gguf")
            writer = gguf.GGUFWriter(path, "llama", endianess=gguf.GGUFEndian.BIG)
            writer.add_tensor("w", np.ones(4, dtype=np.float32))
            write(writer)
            code, _, err = probe(path)
            self.assertEqual(code, 2)
            self.assertIn("a big-endian GGUF file", err)
            self.assertEqual(len(err.strip().splitlines()), 1)


class RealFiles(Case):
    def check_real(self, name):
        path = os.path.join(WEIGHTS, name)
        if not os.path.exists(path):
            print(f"skipped: {path} is absent (scripts/setup.sh fetches it)", file=sys.stderr)
            self.skipTest(f"{path} is absent (scripts/setup.sh fetches it)")
        reader = gguf.GGUFReader(path)  # 22 s for Gemma's 262,144 tokens: read once
        code, out, err = probe(path)
        self.assertEqual(code, 0, err)
        self.compare_with_reader(path, json.loads(out), reader)
        seen = self.check_every_tensor(path, reader)
        print(f"{name}: {len(reader.tensors)} tensors equal, types "
              f"{', '.join(sorted(t.name for t in seen))}", file=sys.stderr)

    def test_smollm2(self):
        self.check_real(REAL_FILES[0])

    def test_gemma3(self):
        self.check_real(REAL_FILES[1])


if __name__ == "__main__":
    BUILD_DIR = runner.build_dir()
    runner.run()
