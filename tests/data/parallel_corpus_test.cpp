// Parallel corpora: OSIS markup to text on lines as the SWORD modules hold them, mod2imp records,
// verse alignment, the split by book, user TSV checks, and (when Debian's modules are installed)
// the real World English Bible / Reina-Valera 1909 corpus.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "attnkit/error.h"
#include "attnkit/data/parallel_corpus.h"
#include "support/test_files.h"

namespace attnkit::data {
namespace {

namespace fs = std::filesystem;
using attnkit::testing::error_of;
using attnkit::testing::read_bytes;
using attnkit::testing::write_bytes;

TEST(OsisToText, WordsFootnoteBetweenWordsLeavesOneSpace) {
  // WEB Genesis 1:1: the note sits between two <w> elements with no space around it.
  const std::string line =
      "<w lemma=\"strong:H0430\">In</w> <w lemma=\"strong:H0853\">the</w> <w lemma=\"strong:H7225\">"
      "beginning</w>, <w lemma=\"strong:H0430\">God</w><note placement=\"foot\"><reference "
      "type=\"annotateRef\">1:1 </reference>The Hebrew word rendered “God” is “אֱלֹהִ֑ים” "
      "(Elohim).</note><w lemma=\"strong:H1254\">created</w> <w lemma=\"strong:H0853\">the</w> "
      "<w lemma=\"strong:H8064\">heavens</w> <w lemma=\"strong:H0430\">and</w> <w "
      "lemma=\"strong:H0853\">the</w> <w lemma=\"strong:H0776\">earth</w>.";
  EXPECT_EQ(osis_to_text(line), "In the beginning, God created the heavens and the earth.");
}

TEST(OsisToText, FootnoteBeforePunctuationLeavesNoSpace) {
  EXPECT_EQ(osis_to_text("<w>Sheol</w><note placement=\"foot\">Sheol is the place of the dead.</note>.’"),
            "Sheol.’");
  EXPECT_EQ(osis_to_text("said<note>x <rdg type=\"alternate\">y</rdg></note>, “Go<note>n</note>”"),
            "said, “Go”");
  EXPECT_EQ(osis_to_text("word<note>a</note> “next"), "word “next");
  EXPECT_EQ(osis_to_text("a<note>x</note>“b"), "a “b");
  // WEB Luke 12:6: spaces around the note, then the question mark.
  EXPECT_EQ(osis_to_text("<w>assaria</w> coins</q> <note placement=\"foot\"><reference type=\"annotateRef\">12:6 "
                         "</reference>An assarion was a small copper coin.</note> <q marker=\"\" who=\"Jesus\">? "
                         "<w>Not</w> one"),
            "assaria coins? Not one");
}

TEST(OsisToText, TheEndOfABookEndsTheText) {
  // WEB Revelation 22:21 carries the glossary after the book's end.
  EXPECT_EQ(osis_to_text("<w>the</w> saints. Amen.  <chapter eID=\"Rev.22\"/><div eID=\"gen35836\" type=\"x-p\"/> "
                         "<div canonical=\"true\" eID=\"gen35575\" osisID=\"Rev\" type=\"book\"/> <div "
                         "sID=\"gen35837\" type=\"glossary\"/> <title level=\"1\" type=\"main\">World English "
                         "Bible Glossary</title> The following words"),
            "the saints. Amen.");
  // A book's start (sID) is no end.
  EXPECT_EQ(osis_to_text("<div canonical=\"true\" osisID=\"Gen\" sID=\"gen24\" type=\"book\"/>In"), "In");
}

TEST(OsisToText, HeadingsAndSpeakersGoCanonicalTitlesStay) {
  // WEB Psalm 3:1: the superscription is canonical verse text (Reina-Valera prints it too).
  const std::string psalm =
      "<div type=\"x-milestone\" subType=\"x-preverse\" sID=\"pv4877\"/><title canonical=\"true\" "
      "type=\"psalm\">A Psalm by David, when he fled from Absalom his son.</title> <lg sID=\"gen7860\"/> "
      "<l level=\"1\" sID=\"gen7861\"/><div type=\"x-milestone\" subType=\"x-preverse\" "
      "eID=\"pv4877\"/>Yahweh, how <w lemma=\"strong:H1732\">my</w> adversaries <w>have</w> "
      "increased!<l eID=\"gen7861\" level=\"1\"/>";
  EXPECT_EQ(osis_to_text(psalm), "A Psalm by David, when he fled from Absalom his son. Yahweh, how my "
                                 "adversaries have increased!");
  EXPECT_EQ(osis_to_text("<chapter n=\"1\"/> <title>BOOK 1</title> <lg/><l level=\"1\"/>Blessed"), "Blessed");
  EXPECT_EQ(osis_to_text("<title level=\"1\" type=\"main\">Éxodo</title><div type=\"x-p\"/>Estos"), "Estos");
  EXPECT_EQ(osis_to_text("<speaker>Beloved</speaker> <lg/><l level=\"1\"/>Let him kiss me"), "Let him kiss me");
}

TEST(OsisToText, BlockTagsSeparateInlineTagsDoNot) {
  EXPECT_EQ(osis_to_text("one<lb/>two<l eID=\"x\"/>three"), "one two three");
  EXPECT_EQ(osis_to_text("que <transChange type=\"added\">están</transChange> <w>debajo</w>"), "que están debajo");
  EXPECT_EQ(osis_to_text("un<w>known</w> <q marker=\"\" who=\"Jesus\">“<w>It</w> is”</q>"), "unknown “It is”");
}

TEST(OsisToText, EntitiesAndWhitespace) {
  EXPECT_EQ(osis_to_text("  Tom &amp; Jerry &lt;b&gt; &quot;q&quot; &#233;t&#xE9;\n\t end  "),
            "Tom & Jerry <b> \"q\" été end");
  EXPECT_EQ(osis_to_text("AT&T &bogus; &#xD800; &#0;"), "AT&T &bogus; &#xD800; &#0;");
  EXPECT_EQ(osis_to_text("<note>only a note</note>"), "");
  EXPECT_EQ(osis_to_text("a <note>nested <note>inner</note> still</note>b"), "a b");
}

TEST(ParseMod2imp, VersesOnlyWithTheirText) {
  const std::string imp =
      "$$$[ Module Heading ]\n\n$$$Genesis 0:0\n<div sID=\"g\"/>Preface\n$$$Genesis 1:0\n<chapter n=\"1\"/>\n"
      "$$$Genesis 1:1\n<w>In</w> <w>the</w>\n<w>beginning</w>.\n$$$Song of Solomon 2:3\r\nLike an apple tree\r\n"
      "$$$Genesis 1:2\n\n$$$I John 5:7\nthree";
  const auto entries = parse_mod2imp(imp);
  ASSERT_EQ(entries.size(), 4u);
  EXPECT_EQ(entries[0].key, "Genesis 1:1");
  EXPECT_EQ(entries[0].text, "In the beginning.");
  EXPECT_EQ(entries[1].book, "Song of Solomon");
  EXPECT_EQ(entries[1].chapter, 2);
  EXPECT_EQ(entries[1].verse, 3);
  EXPECT_EQ(entries[1].text, "Like an apple tree");
  EXPECT_EQ(entries[2].text, "");
  EXPECT_EQ(entries[3].book, "I John");
}

std::vector<SwordEntry> entries(const std::vector<std::pair<std::string, std::string>>& keyed) {
  std::vector<SwordEntry> out;
  for (const auto& [key, text] : keyed) {
    SwordEntry e;
    e.key = key;
    e.book = key.substr(0, key.rfind(' '));
    e.text = text;
    out.push_back(e);
  }
  return out;
}

TEST(AlignVerses, KeepsVersesNonEmptyInBothInSourceOrder) {
  const auto source = entries({{"Ruth 1:1", "a"}, {"Ruth 1:2", ""}, {"Mark 1:1", "b"}, {"Tobit 1:1", "t"},
                               {"Mark 1:2", "c"}, {"Mark 1:1", "again"}});
  const auto target = entries({{"Mark 1:2", "C"}, {"Mark 1:1", "B"}, {"Ruth 1:1", "A"}, {"Ruth 1:2", "X"}});
  const auto pairs = align_verses(source, target);
  ASSERT_EQ(pairs.size(), 3u);
  EXPECT_EQ(pairs[0].source + pairs[0].target, "aA");
  EXPECT_EQ(pairs[1].source + pairs[1].target, "bB");
  EXPECT_EQ(pairs[2].source + pairs[2].target, "cC");
  EXPECT_EQ(pairs[2].book, "Mark");
}

std::vector<ParallelPair> toy_bible() {
  std::vector<ParallelPair> pairs;
  for (const char* book : {"Genesis", "Ruth", "Jonah", "Mark", "Acts", "Jude"})
    for (int v = 1; v <= 5; ++v)
      pairs.push_back({book, std::string(book) + " 1:" + std::to_string(v), book + std::to_string(v), "t"});
  return pairs;
}

TEST(SplitByBook, BooksNeverCrossSplits) {
  const auto splits = split_by_book(toy_bible(), {"Ruth", "Jude"}, {"Mark"});
  auto books = [](const std::vector<ParallelPair>& ps) {
    std::set<std::string> out;
    for (const auto& p : ps) out.insert(p.book);
    return out;
  };
  EXPECT_EQ(books(splits.validation), (std::set<std::string>{"Jude", "Ruth"}));
  EXPECT_EQ(books(splits.test), (std::set<std::string>{"Mark"}));
  EXPECT_EQ(books(splits.train), (std::set<std::string>{"Acts", "Genesis", "Jonah"}));
  EXPECT_EQ(splits.train.size() + splits.validation.size() + splits.test.size(), 30u);
  EXPECT_EQ(splits.train.front().key, "Genesis 1:1");  // order kept
  EXPECT_EQ(error_of([&] { split_by_book(toy_bible(), {"Ruth"}, {"Ruth"}); }),
            "book 'Ruth' is named for both validation and test");
  EXPECT_NE(error_of([&] { split_by_book(toy_bible(), {"Rut"}, {"Mark"}); }).find("book 'Rut' has no verse pair"),
            std::string::npos);
}

TEST(WriteParallelSplits, WritesThreeFilesDeterministically) {
  const auto dir = attnkit::testing::scratch_directory("train_test_scratch");
  const auto splits = split_by_book(toy_bible(), {"Ruth"}, {"Mark"});
  const auto files = write_parallel_splits(splits, (dir / "a").string());
  write_parallel_splits(splits, (dir / "b").string());
  EXPECT_EQ(read_bytes(files.validation), "Ruth1\tt\nRuth2\tt\nRuth3\tt\nRuth4\tt\nRuth5\tt\n");
  for (const char* name : {"train.tsv", "val.tsv", "test.tsv"})
    EXPECT_EQ(read_bytes(dir / "a" / name), read_bytes(dir / "b" / name)) << name;
  EXPECT_EQ(fs::path(files.train).filename(), "train.tsv");
}

TEST(UserPairs, SplitInFileOrder) {
  const auto dir = attnkit::testing::scratch_directory("train_test_scratch");
  std::string content;
  for (int i = 0; i < 20; ++i) content += "s" + std::to_string(i) + "\tt" + std::to_string(i) + "\n";
  const auto path = write_bytes(dir / "pairs.tsv", content);
  const auto splits = split_user_pairs(path, 0.1, 0.2);
  ASSERT_EQ(splits.train.size(), 14u);
  ASSERT_EQ(splits.validation.size(), 2u);
  ASSERT_EQ(splits.test.size(), 4u);
  EXPECT_EQ(splits.validation.front().source, "s14");
  EXPECT_EQ(splits.test.back().target, "t19");
}

TEST(UserPairs, BadInputsNameFileAndLineAndWriteNothing) {
  const auto dir = attnkit::testing::scratch_directory("train_test_scratch");
  const std::string good = "a\tb\nc\td\ne\tf\ng\th\n";
  struct Case {
    std::string content, expected;
  };
  const std::vector<Case> cases = {
      {good + "no tab here\n", ":5: expected 2 tab-separated columns, got 1"},
      {good + "   \tsomething\n", ":5: empty source"},
      {"x\t\n" + good, ":1: empty target"},
      {good + "bad \xff\xfe utf8\tok\n", ":5: "},
  };
  for (const auto& c : cases) {
    const auto path = write_bytes(dir / "pairs.tsv", c.content);
    const auto out = dir / "out";
    std::string message;
    try {
      write_parallel_splits(split_user_pairs(path, 0.25, 0.25), out.string());
    } catch (const Error& e) {
      message = e.what();
    }
    EXPECT_NE(message.find(path + c.expected), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_FALSE(fs::exists(out));
  }
  const auto path = write_bytes(dir / "pairs.tsv", good);
  EXPECT_NE(error_of([&] { split_user_pairs(path, 0.5, 0.5); }).find("sum below 1"), std::string::npos);
  EXPECT_NE(error_of([&] { split_user_pairs(path, 0.01, 0.0); }).find("too few"), std::string::npos);
}

TEST(SwordModules, MissingModuleIsOneLineError) {
  const std::string message = error_of([] { export_sword_module("NoSuchModuleXyz"); });
  ASSERT_FALSE(message.empty());
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  // Without mod2imp the error says which package to install; with it, mod2imp's own complaint.
  EXPECT_TRUE(message.find("libsword-utils") != std::string::npos || message.find("NoSuchModuleXyz") != std::string::npos)
      << message;
}

// The installed Debian modules (sword-text-web, sword-text-sparv): the whole corpus.
TEST(SwordModules, WorldEnglishBibleAndReinaValera) {
  const fs::path mods = "/usr/share/sword/mods.d";
  if (!fs::exists(mods / "engWEB2015eb.conf") || !fs::exists(mods / "spaRV1909eb.conf"))
    GTEST_SKIP() << "sword-text-web / sword-text-sparv not installed";
  std::string web, rv;
  try {
    web = export_sword_module("engWEB2015eb");
    rv = export_sword_module("spaRV1909eb");
  } catch (const Error& e) {
    GTEST_SKIP() << e.what();  // no mod2imp
  }
  const auto pairs = align_verses(parse_mod2imp(web), parse_mod2imp(rv));
  EXPECT_GT(pairs.size(), 29000u);
  EXPECT_LT(pairs.size(), 31200u);  // the KJV versification has 31,102 verses
  const auto& first = pairs.front();
  EXPECT_EQ(first.key, "Genesis 1:1");
  EXPECT_EQ(first.source, "In the beginning, God created the heavens and the earth.");
  EXPECT_EQ(first.target, "EN el principio crió Dios los cielos y la tierra.");  // RV 1909 as printed
  for (const auto& p : pairs) {
    ASSERT_EQ(p.source.find('<'), std::string::npos) << p.key << ": " << p.source;
    ASSERT_EQ(p.target.find('<'), std::string::npos) << p.key << ": " << p.target;
    ASSERT_EQ(p.source.find("  "), std::string::npos) << p.key;
    ASSERT_EQ(p.source.find('\t'), std::string::npos) << p.key;
    ASSERT_LT(p.source.size(), 1500u) << p.key;  // no back matter glued to a verse (Esther 8:9: ~530)
    ASSERT_LT(p.target.size(), 1500u) << p.key;
  }
  EXPECT_EQ(pairs.back().key, "Revelation of John 22:21");
  EXPECT_EQ(pairs.back().source, "The grace of the Lord Jesus Christ be with all the saints. Amen.");
  const auto splits = split_by_book(pairs, kDefaultValidationBooks, kDefaultTestBooks);
  EXPECT_GT(splits.validation.size(), 250u);
  EXPECT_GT(splits.test.size(), 800u);
  std::set<std::string> train_books;
  for (const auto& p : splits.train) train_books.insert(p.book);
  for (const auto& p : splits.validation) EXPECT_EQ(train_books.count(p.book), 0u);
  for (const auto& p : splits.test) EXPECT_EQ(train_books.count(p.book), 0u);
}

}  // namespace
}  // namespace attnkit::data
