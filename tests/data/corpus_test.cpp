// `attnkit data corpus` (data/corpus.h): fortune parsing, ANSI codes removed, the hash split, errors,
// and the installed Debian fortunes when they are there.
#include <gtest/gtest.h>

#include <filesystem>

#include "attnkit/data/corpus.h"
#include "support/test_files.h"

namespace fs = std::filesystem;

namespace attnkit::data {
namespace {

using attnkit::testing::error_of;
using attnkit::testing::read_bytes;
using attnkit::testing::scratch_directory;
using attnkit::testing::write_bytes;

TEST(Corpus, StripsAnsiEscapes) {
  EXPECT_EQ(strip_ansi_escapes("\x1b[32m《春意》\x1b[m"), "《春意》");
  EXPECT_EQ(strip_ansi_escapes("a\x1b[1;33mb\x1b[0mc"), "abc");
  EXPECT_EQ(strip_ansi_escapes("x\x1b" "Cy"), "xy");        // two-character escape
  EXPECT_EQ(strip_ansi_escapes("end\x1b"), "end");          // lone ESC at the end
  EXPECT_EQ(strip_ansi_escapes("no escapes"), "no escapes");
}

TEST(Corpus, ReadsFortunesAndParagraphs) {
  const auto dir = scratch_directory("corpus-read");
  const auto fortune = write_bytes(dir / "f", "\x1b[32mTitle\x1b[m  \n\nline two\n%\n\n%\nsecond\n%\n");
  const auto docs = read_documents(fortune, DocumentFormat::kFortune);
  ASSERT_EQ(docs.size(), 2u);  // the empty fortune is dropped
  EXPECT_EQ(docs[0].text, "Title\nline two");
  EXPECT_EQ(docs[1].text, "second");
  const auto para = write_bytes(dir / "p", "\n\none\ntwo\n\n\nthree\n");
  const auto paras = read_documents(para, DocumentFormat::kParagraphs);
  ASSERT_EQ(paras.size(), 2u);
  EXPECT_EQ(paras[0].text, "one\ntwo");
  EXPECT_EQ(paras[1].text, "three");
}

TEST(Corpus, SplitIsByDocumentTextAndWritesBothFiles) {
  const auto dir = scratch_directory("corpus-split");
  std::string content;
  for (int i = 0; i < 400; ++i) content += "document number " + std::to_string(i) + "\n\n";
  content += "document number 7\n";  // a duplicate lands where its twin does
  const auto file = write_bytes(dir / "in.txt", content);
  CorpusOptions o;
  o.sources = {file};
  o.valid_fraction = 0.2;
  const auto s = write_corpus(o, (dir / "out").string());
  EXPECT_EQ(s.train_documents + s.valid_documents, 401);
  EXPECT_GT(s.valid_documents, 40);   // 80 expected; binomial sd ~8
  EXPECT_LT(s.valid_documents, 120);
  const std::string train = read_bytes(s.train_path), valid = read_bytes(s.valid_path);
  for (int i = 0; i < 400; ++i) {
    const std::string doc = "document number " + std::to_string(i) + "\n";
    const bool in_train = train.find(doc) != std::string::npos, in_valid = valid.find(doc) != std::string::npos;
    EXPECT_NE(in_train, in_valid) << doc;  // in exactly one file
    EXPECT_EQ(in_valid, in_validation_split("document number " + std::to_string(i), 0.2));
  }
}

TEST(Corpus, BadInputsAreOneLineErrorsAndWriteNothing) {
  const auto dir = scratch_directory("corpus-bad");
  const auto out = dir / "out";
  CorpusOptions o;
  o.sources = {write_bytes(dir / "ok.txt", "text\n")};
  o.valid_fraction = 1.0;
  EXPECT_EQ(error_of([&] { write_corpus(o, out.string()); }), "--valid-fraction 1 is not in [0, 1)");
  o.valid_fraction = 0.05;
  o.sources = {"no-such-source"};
  EXPECT_EQ(error_of([&] { write_corpus(o, out.string()); }),
            "corpus source 'no-such-source' is not a file nor one of fortunes, fortunes-zh, tang300, song100");
  o.sources = {write_bytes(dir / "bad.txt", "fine\nbad \xff byte\n")};
  EXPECT_EQ(error_of([&] { write_corpus(o, out.string()); }), (dir / "bad.txt").string() + ":2: invalid UTF-8");
  o.sources = {write_bytes(dir / "empty.txt", "\n\n")};
  EXPECT_EQ(error_of([&] { write_corpus(o, out.string()); }),
            "data corpus: no documents for the training file (read 1 file(s), 0 held out)");
  o.sources = {"fortunes"};
  o.fortunes_dir = (dir / "nowhere").string();
  EXPECT_NE(error_of([&] { write_corpus(o, out.string()); }).find("(Debian package fortunes;"), std::string::npos);
  EXPECT_FALSE(fs::exists(out));
}

TEST(Corpus, DebianFortunesZhLoseTheirColourCodes) {
  if (!fs::exists("/usr/share/games/fortunes/tang300")) GTEST_SKIP() << "fortunes-zh is not installed";
  const auto dir = scratch_directory("corpus-zh");
  CorpusOptions o;
  o.sources = {"tang300", "song100"};
  const auto s = write_corpus(o, (dir / "out").string());
  EXPECT_GT(s.train_documents, 300);  // 300 Tang poems + 100 Song lyrics, 5% held out
  EXPECT_GT(s.valid_documents, 0);
  const std::string train = read_bytes(s.train_path);
  EXPECT_EQ(train.find('\x1b'), std::string::npos);
  EXPECT_EQ(train.find("[32m"), std::string::npos);
  EXPECT_EQ(train.find("\n%\n"), std::string::npos);
  EXPECT_NE(train.find("作者："), std::string::npos);
}

}  // namespace
}  // namespace attnkit::data
