#pragma once
// `attnkit data corpus`: text corpora for the language-model tasks (lm, mlm, plm) from what Debian
// ships (no downloads), written as train.txt / valid.txt.
//
// Sources (named, or any text file):
//   fortunes     every English fortune file of the `fortunes` package (the .u8 copy where there is
//                one), one document per fortune ("%" lines separate them)
//   fortunes-zh  the three files of `fortunes-zh` (chinese, tang300, song100); tang300 and song100
//                alone are sources too. Their titles and authors carry ANSI colour codes
//                (ESC [ 32m ... ESC [ m): the reader removes every ANSI escape sequence.
//   FILE         a UTF-8 text file; documents are separated by blank lines, or by "%" lines with
//                --format fortune.
// Each document keeps its non-blank lines (trailing spaces cut; a fortune's inner blank lines go), and
// documents are written one after another with a blank line between them: blank lines separate
// documents and nothing else, and a document never spans two files. Which file a document goes to is
// a pure function of its text (FNV-1a 64 of it, modulo 10^6, below valid_fraction · 10^6 → valid):
// identical documents land in the same split, and the split does not move when sources are added.
#include <cstdint>
#include <string>
#include <vector>

namespace attnkit::data {

enum class DocumentFormat { kParagraphs, kFortune };

struct CorpusDocument {
  std::string source;  // the file it came from
  std::string text;    // lines joined by '\n', no trailing newline
};

// Removes ANSI escape sequences: CSI (ESC '[' parameters intermediates final byte 0x40-0x7E),
// other two-character ESC sequences, and a lone ESC.
std::string strip_ansi_escapes(const std::string& text);

// The documents of one file. Throws attnkit::Error "<path>: ..." when it cannot be read, or
// "<path>:<line>: invalid UTF-8" for a line that is not UTF-8.
std::vector<CorpusDocument> read_documents(const std::string& path, DocumentFormat format);

// The files behind a source name (or the file itself): throws a one-line error listing the names
// for an unknown name that is not a file, and naming the Debian package when its files are absent.
std::vector<std::string> corpus_source_files(const std::string& source, const std::string& fortunes_dir =
                                                                            "/usr/share/games/fortunes");

// true when a document of this text goes to the validation file.
bool in_validation_split(const std::string& text, double valid_fraction);

struct CorpusOptions {
  std::vector<std::string> sources;  // names or files, in order
  DocumentFormat file_format = DocumentFormat::kParagraphs;  // for sources that are files
  double valid_fraction = 0.05;
  std::string fortunes_dir = "/usr/share/games/fortunes";
};

struct CorpusSummary {
  std::string train_path, valid_path;
  int64_t train_documents = 0, valid_documents = 0;
  int64_t train_bytes = 0, valid_bytes = 0;
  std::vector<std::string> files;  // every file read
};

// Reads every source, splits, and writes out_dir/train.txt and out_dir/valid.txt atomically.
// Settings are checked first (valid_fraction in [0, 1), at least one source, every source found);
// no documents at all, or none in train, is an error; nothing is written then.
CorpusSummary write_corpus(const CorpusOptions& options, const std::string& out_dir);

}  // namespace attnkit::data
