// One tokenizer interface (text/text_tokenizer.h): the Hugging Face pipeline (WordPiece, byte-level
// BPE, Unigram) and Marian's SentencePiece pair give through TextTokenizer exactly what their
// concrete classes give (ids, text, token <-> id, vocabulary size, special ids); the factories
// pick the class for a path; end_token_id tries its candidates in its documented order.
// Marian's SentencePiece models are written here as ModelProto bytes (a few pieces, identity
// normaliser), so the test needs no trained file.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "attnkit/error.h"
#include "attnkit/text/byte_level.h"
#include "attnkit/text/marian_tokenizer.h"
#include "attnkit/text/pretrained.h"
#include "attnkit/text/text_stream.h"
#include "attnkit/text/text_tokenizer.h"
#include "attnkit/text/unigram.h"
#include "reference_support.h"
#include "support/test_files.h"

namespace attnkit::text {
namespace {

using attnkit::testing::error_of;
using testing::fs::path;

// --- SentencePiece ModelProto bytes (protobuf wire format) -------------------------------------

std::string proto_varint(uint64_t value) {
  std::string out;
  do {
    const auto low = static_cast<unsigned char>(value & 0x7F);
    value >>= 7;
    out.push_back(static_cast<char>(value != 0 ? low | 0x80 : low));
  } while (value != 0);
  return out;
}

std::string proto_bytes_field(int field, const std::string& bytes) {
  return proto_varint(uint64_t(field) << 3 | 2) + proto_varint(bytes.size()) + bytes;
}

std::string proto_varint_field(int field, uint64_t value) {
  return proto_varint(uint64_t(field) << 3) + proto_varint(value);
}

std::string proto_float_field(int field, float value) {
  char raw[4];
  std::memcpy(raw, &value, 4);  // little-endian on every machine attnkit builds for
  return proto_varint(uint64_t(field) << 3 | 5) + std::string(raw, 4);
}

struct SpmPiece {
  std::string piece;
  float score;
  int type;  // 1 normal, 2 unknown, 3 control
};

// A Unigram model: <unk>, <s>, </s>, then `words` (each "▁word", better scored than letters), "▁"
// and the single letters of `letters`; identity normaliser with SentencePiece's whitespace rules.
std::string spm_model_bytes(const std::vector<std::string>& words, const std::string& letters) {
  std::vector<SpmPiece> pieces = {{"<unk>", 0, 2}, {"<s>", 0, 3}, {"</s>", 0, 3}};
  for (const auto& word : words) pieces.push_back({"\xE2\x96\x81" + word, -1.0f, 1});
  pieces.push_back({"\xE2\x96\x81", -3.0f, 1});
  for (char letter : letters) pieces.push_back({std::string(1, letter), -5.0f, 1});
  std::string proto;
  for (const auto& p : pieces)
    proto += proto_bytes_field(1, proto_bytes_field(1, p.piece) + proto_float_field(2, p.score) +
                                      proto_varint_field(3, uint64_t(p.type)));
  proto += proto_bytes_field(2, proto_varint_field(3, 1));           // trainer_spec: model_type UNIGRAM
  proto += proto_bytes_field(3, proto_bytes_field(1, "identity"));  // normalizer_spec
  return proto;
}

const std::vector<std::string> kSourceWords = {"the", "cat", "sat", "on", "mat"};
const std::string kSourceLetters = "thecasomn.,!";
const std::vector<std::string> kTargetWords = {"el", "gato", "se", "sento"};
const std::string kTargetLetters = "elgatosn.";

// A Marian directory as Opus-MT's: source.spm, target.spm and one vocab.json over both
// (</s> 0, <unk> 1, >>es<< 2, the pieces, then `extra` tokens and <pad> last), plus
// tokenizer_config.json when `config` is not null.
path write_marian_dir(const path& dir, const std::vector<std::string>& extra = {},
                      const nlohmann::json& config = nullptr) {
  testing::fs::create_directories(dir);
  testing::write_all(dir / "source.spm", spm_model_bytes(kSourceWords, kSourceLetters));
  testing::write_all(dir / "target.spm", spm_model_bytes(kTargetWords, kTargetLetters));
  nlohmann::ordered_json vocab = {{"</s>", 0}, {"<unk>", 1}, {">>es<<", 2}};
  auto add = [&](const std::string& token) {
    if (vocab.contains(token)) return;
    const int id = int(vocab.size());
    vocab[token] = id;
  };
  for (const auto* side : {&kSourceWords, &kTargetWords})
    for (const auto& word : *side) add("\xE2\x96\x81" + word);
  add("\xE2\x96\x81");
  for (char letter : kSourceLetters + kTargetLetters) add(std::string(1, letter));
  for (const auto& token : extra) add(token);
  add("<pad>");
  testing::write_all(dir / "vocab.json", vocab.dump());
  if (!config.is_null()) testing::write_all(dir / "tokenizer_config.json", config.dump());
  return dir;
}

// --- Hugging Face pipelines ---------------------------------------------------------------------

Tokenizer wordpiece_tokenizer() {
  return make_bert_tokenizer(Vocabulary::from_tokens({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the",
                                                      "cat", "sat", "##s", "on", "mat", ".", "春", "风"}));
}

Tokenizer byte_level_tokenizer() {
  std::vector<std::string> tokens;
  for (int byte = 0; byte < 256; ++byte)
    tokens.push_back(byte_level::bytes_to_token(std::string(1, static_cast<char>(byte))));
  tokens.push_back("<|endoftext|>");
  return make_gpt2_tokenizer(Vocabulary::from_tokens(tokens), {});
}

Tokenizer unigram_tokenizer() {
  TokenizerParts parts;
  std::vector<UnigramPiece> pieces = {{"<unk>", 0.0}, {"\xE2\x96\x81" "the", -1.0}, {"\xE2\x96\x81" "cat", -1.5},
                                      {"\xE2\x96\x81", -3.0}};
  for (const char* letter : {"t", "h", "e", "c", "a", "s"}) pieces.push_back({letter, -5.0});
  parts.model = std::make_shared<Unigram>(std::move(pieces), 0u, false);
  parts.pre_tokenizer = MetaspacePreTokenizer{};
  parts.decoder = MetaspaceDecoder{};
  return Tokenizer(std::move(parts));
}

std::vector<int64_t> as_int64(const std::vector<uint32_t>& ids) {
  return std::vector<int64_t>(ids.begin(), ids.end());
}

const std::vector<std::string> kTexts = {"the cat sat on the mat.", "the cats sat", "春风 the",
                                         "Zebra, quick!", "", "  the  cat  "};

// Every interface call against the concrete class, on texts, their ids and every vocabulary id.
void expect_pipeline_through_interface(const Tokenizer& tokenizer) {
  const TextTokenizer& any = tokenizer;
  for (const auto& text : kTexts) {
    SCOPED_TRACE(text);
    for (bool special : {true, false}) {
      const auto ids = tokenizer.encode(text, special).ids;
      EXPECT_EQ(any.encode_ids(text, special), as_int64(ids));
      EXPECT_EQ(any.encode_ids(text, special, TextSide::kTarget), as_int64(ids));
      for (bool skip : {true, false})
        for (auto style : {TextStyle::kTokenizer, TextStyle::kReadable})
          EXPECT_EQ(any.decode_ids(as_int64(ids), skip, style), tokenizer.decode(ids, skip, style));
    }
    EXPECT_EQ(any.encode_ids(text), as_int64(tokenizer.encode(text).ids));
    EXPECT_EQ(any.decode_ids(any.encode_ids(text)), tokenizer.decode(tokenizer.encode(text).ids));
  }
  EXPECT_EQ(any.vocab_size(), tokenizer.vocab_size());
  for (int64_t id = 0; id < int64_t(tokenizer.vocab_size()); ++id) {
    const std::string* token = any.token_of(id);
    ASSERT_NE(token, nullptr) << id;
    EXPECT_EQ(token, tokenizer.id_to_token(uint32_t(id)));
    EXPECT_EQ(any.id_of(*token), std::optional<int64_t>(*tokenizer.token_to_id(*token)));
  }
  EXPECT_EQ(any.token_of(-1), nullptr);
  EXPECT_EQ(any.token_of(int64_t(tokenizer.vocab_size()) + 5), nullptr);
  EXPECT_EQ(any.id_of("no such token"), std::nullopt);
  // An id outside uint32 is converted as the commands always converted it, and named the same.
  const std::string message = error_of([&] { any.decode_ids({-1}); });
  EXPECT_NE(message, "");
  EXPECT_EQ(message, error_of([&] { tokenizer.decode({uint32_t(-1)}); }));
}

TEST(TextTokenizer, WordPieceThroughTheInterfaceIsTheTokenizer) {
  const Tokenizer tokenizer = wordpiece_tokenizer();
  expect_pipeline_through_interface(tokenizer);
  const TextTokenizer& any = tokenizer;
  EXPECT_EQ(any.encode_ids("the cats."), (std::vector<int64_t>{2, 5, 6, 8, 11, 3}));
  EXPECT_EQ(any.decode_ids({2, 12, 13, 3}, true, TextStyle::kReadable), "春风");
  EXPECT_EQ(any.decode_ids({2, 12, 13, 3}), "春 风");
  const SpecialTokenIds special = any.special_ids();
  EXPECT_EQ(special.unknown, std::optional<int64_t>(1));
  EXPECT_EQ(special.end, std::nullopt);  // tokenizer.json names no end token
  EXPECT_EQ(special.start, std::nullopt);
  EXPECT_EQ(special.pad, std::nullopt);  // no padding settings
  Tokenizer padded = wordpiece_tokenizer();
  PaddingOptions padding;
  padding.pad_id = 0;
  padding.length = 8;
  padded.set_padding(padding);
  EXPECT_EQ(padded.special_ids().pad, std::optional<int64_t>(0));
  EXPECT_EQ(padded.encode_ids("the cat"), as_int64(padded.encode("the cat").ids));
  EXPECT_EQ(padded.encode_ids("the cat").size(), 8u);
  // [CLS] a [SEP]: not a lone begin token (padded or not).
  EXPECT_EQ(leading_special_token(tokenizer), std::nullopt);
  EXPECT_EQ(leading_special_token(padded), std::nullopt);
}

TEST(TextTokenizer, ByteLevelBpeThroughTheInterfaceIsTheTokenizer) {
  const Tokenizer tokenizer = byte_level_tokenizer();
  expect_pipeline_through_interface(tokenizer);
  const SpecialTokenIds special = tokenizer.special_ids();
  EXPECT_EQ(special.unknown, std::nullopt);  // every byte has a token
  EXPECT_EQ(special.end, std::nullopt);
  EXPECT_EQ(leading_special_token(tokenizer), std::nullopt);  // GPT-2 puts nothing before a text
}

TEST(TextTokenizer, UnigramThroughTheInterfaceIsTheTokenizer) {
  const Tokenizer tokenizer = unigram_tokenizer();
  expect_pipeline_through_interface(tokenizer);
  EXPECT_EQ(tokenizer.encode_ids("the cat"), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(tokenizer.special_ids().unknown, std::optional<int64_t>(0));
}

TEST(TextTokenizer, MarianThroughTheInterfaceIsTheMarianTokenizer) {
  const path dir = write_marian_dir(testing::scratch_dir() / "opus-mt-tiny");
  const MarianTokenizer marian(dir.string());
  const TextTokenizer& any = marian;
  const int64_t the = *marian.token_to_id("\xE2\x96\x81the"), cat = *marian.token_to_id("\xE2\x96\x81" "cat");
  const int64_t el = *marian.token_to_id("\xE2\x96\x81" "el"), gato = *marian.token_to_id("\xE2\x96\x81gato");
  // Known ids first: a language code kept whole, the source side cut by source.spm, the target
  // side by target.spm, </s> (0) appended with special tokens.
  EXPECT_EQ(any.encode_ids(">>es<< the cat"), (std::vector<int64_t>{2, the, cat, 0}));
  EXPECT_EQ(any.encode_ids("el gato", false, TextSide::kTarget), (std::vector<int64_t>{el, gato}));
  EXPECT_NE(any.encode_ids("el gato", false), (std::vector<int64_t>{el, gato}));  // source.spm's pieces
  EXPECT_EQ(any.decode_ids({el, gato, 0}), "el gato");
  EXPECT_EQ(any.decode_ids({el, gato, 0}, false), "el gato</s>");  // as transformers joins it
  const std::vector<std::string> texts = {"the cat sat on the mat.", ">>es<< the cat", "Zebra,  quick!",
                                          "el gato se sento.", ""};
  for (const auto& text : texts) {
    SCOPED_TRACE(text);
    for (bool special : {true, false}) {
      EXPECT_EQ(any.encode_ids(text, special), marian.encode(text, special));
      EXPECT_EQ(any.encode_ids(text, special, TextSide::kTarget), marian.encode_target(text, special));
      const auto ids = marian.encode(text, special);
      for (bool skip : {true, false})
        for (auto style : {TextStyle::kTokenizer, TextStyle::kReadable})
          EXPECT_EQ(any.decode_ids(ids, skip, style), marian.decode(ids, skip));
    }
  }
  EXPECT_EQ(any.vocab_size(), marian.vocab_size());
  std::vector<int64_t> every;
  for (int64_t id = 0; id < int64_t(marian.vocab_size()); ++id) {
    const std::string* token = any.token_of(id);
    ASSERT_NE(token, nullptr) << id;
    EXPECT_EQ(any.id_of(*token), std::optional<int64_t>(id));
    EXPECT_EQ(marian.token_to_id(*token), std::optional<int64_t>(id));
    every.push_back(id);
  }
  EXPECT_EQ(any.decode_ids(every, false), marian.decode(every, false));
  EXPECT_EQ(any.token_of(int64_t(marian.vocab_size())), nullptr);
  EXPECT_EQ(any.id_of("no such token"), std::nullopt);
  const SpecialTokenIds special = any.special_ids();
  EXPECT_EQ(special.end, std::optional<int64_t>(marian.eos_id()));
  EXPECT_EQ(special.end, std::optional<int64_t>(0));
  EXPECT_EQ(special.pad, std::optional<int64_t>(marian.pad_id()));
  EXPECT_EQ(special.pad, std::optional<int64_t>(int64_t(marian.vocab_size()) - 1));
  EXPECT_EQ(special.unknown, std::optional<int64_t>(1));
  EXPECT_EQ(special.start, std::nullopt);
  // Streamed text grows to the whole decode, as generate prints it.
  const auto ids = marian.encode("the cat sat on the mat.", false);
  TextStream stream(any);
  std::string streamed;
  for (int64_t id : ids) streamed += stream.add(id);
  streamed += stream.finish();
  EXPECT_EQ(streamed, marian.decode(ids, true));
}

TEST(TextTokenizer, FactoriesPickTheClassForAPath) {
  const path scratch = testing::scratch_dir();
  const path marian_dir = write_marian_dir(scratch / "marian");
  const path bert_dir = scratch / "bert";
  save_tokenizer(wordpiece_tokenizer(), bert_dir.string());
  const path empty_dir = scratch / "empty";
  testing::fs::create_directories(empty_dir);

  auto marian = load_text_tokenizer(marian_dir.string());
  ASSERT_NE(dynamic_cast<const MarianTokenizer*>(marian.get()), nullptr);
  EXPECT_EQ(marian->encode_ids("the cat"), MarianTokenizer(marian_dir.string()).encode("the cat"));
  auto bert = load_text_tokenizer(bert_dir.string());
  ASSERT_NE(dynamic_cast<const Tokenizer*>(bert.get()), nullptr);
  EXPECT_EQ(bert->encode_ids("the cat"), as_int64(wordpiece_tokenizer().encode("the cat").ids));
  auto from_file = load_text_tokenizer((bert_dir / "vocab.txt").string());
  ASSERT_NE(dynamic_cast<const Tokenizer*>(from_file.get()), nullptr);

  EXPECT_NE(dynamic_cast<const MarianTokenizer*>(find_text_tokenizer(marian_dir.string()).get()), nullptr);
  EXPECT_NE(dynamic_cast<const Tokenizer*>(find_text_tokenizer(bert_dir.string()).get()), nullptr);
  EXPECT_FALSE(find_text_tokenizer(empty_dir.string()));
  EXPECT_FALSE(find_text_tokenizer((scratch / "missing").string()));

  // --tokenizer wins over the model directory; without it, the directory's (or none).
  EXPECT_NE(dynamic_cast<const Tokenizer*>(tokenizer_for_model(bert_dir.string(), marian_dir.string()).get()),
            nullptr);
  EXPECT_NE(dynamic_cast<const MarianTokenizer*>(tokenizer_for_model("", marian_dir.string()).get()), nullptr);
  EXPECT_FALSE(tokenizer_for_model("", empty_dir.string()));
  const std::string message = error_of([&] { tokenizer_for_model(empty_dir.string(), marian_dir.string()); });
  EXPECT_NE(message.find("no tokenizer.json"), std::string::npos) << message;
}

// --- end_token_id --------------------------------------------------------------------------------

Tokenizer wordpiece_with(const std::vector<std::string>& specials) {
  std::vector<std::string> tokens = {"[PAD]", "[UNK]", "the", "cat"};
  tokens.insert(tokens.end(), specials.begin(), specials.end());
  return make_bert_tokenizer(Vocabulary::from_tokens(tokens));
}

TEST(EndToken, NamesInOrderModelTokenFirst) {
  const EndTokenRule seq2seq{"</s>", /*fallbacks=*/true};
  EXPECT_EQ(end_token_names(seq2seq), "</s>, [SEP], [EOS], <|endoftext|>");
  EXPECT_EQ(end_token_names({"[SEP]"}), "[SEP]");
  EXPECT_EQ(end_token_names({"<|endoftext|>"}), "<|endoftext|>");

  // ids: [PAD] 0, [UNK] 1, the 2, cat 3, then the specials from 4 on.
  EXPECT_EQ(end_token_id(wordpiece_with({"<|endoftext|>", "[EOS]", "[SEP]", "</s>"}), seq2seq), 7);
  EXPECT_EQ(end_token_id(wordpiece_with({"<|endoftext|>", "[EOS]", "[SEP]"}), seq2seq), 6);
  EXPECT_EQ(end_token_id(wordpiece_with({"<|endoftext|>", "[EOS]"}), seq2seq), 5);
  EXPECT_EQ(end_token_id(wordpiece_with({"<|endoftext|>"}), seq2seq), 4);
  EXPECT_EQ(end_token_id(wordpiece_with({}), seq2seq), std::nullopt);
  // Without fallbacks (generate's language models): the model's token or none.
  EXPECT_EQ(end_token_id(wordpiece_with({"[SEP]", "<|endoftext|>"}), {"<|endoftext|>"}), 5);
  EXPECT_EQ(end_token_id(wordpiece_with({"[SEP]", "<|endoftext|>"}), {"[SEP]"}), 4);
  EXPECT_EQ(end_token_id(wordpiece_with({"[SEP]"}), {"<|endoftext|>"}), std::nullopt);
  // A tokenizer.json names no end token of its own: tokenizer_end_first changes nothing.
  EXPECT_EQ(end_token_id(wordpiece_with({"[SEP]"}), {"</s>", true, false}), 4);
}

TEST(EndToken, ATokenizersOwnEndComesFirstWhenAsked) {
  // Marian's eos_token named "<end>" in tokenizer_config.json while "</s>" is in the vocabulary:
  // generate takes the tokenizer's own end token, analyze heads looks "</s>" up by name.
  const path dir = write_marian_dir(testing::scratch_dir() / "own-end", {"<end>", "[SEP]"},
                                    nlohmann::json{{"eos_token", "<end>"}});
  const MarianTokenizer marian(dir.string());
  const int64_t own = *marian.token_to_id("<end>");
  ASSERT_EQ(marian.eos_id(), own);
  EXPECT_EQ(end_token_id(marian, {"</s>", true}), own);
  EXPECT_EQ(end_token_id(marian, {"<|endoftext|>", false}), own);
  EXPECT_EQ(end_token_id(marian, {"</s>", true, /*tokenizer_end_first=*/false}), 0);
  EXPECT_EQ(end_token_id(marian, {"<|endoftext|>", true, false}), *marian.token_to_id("[SEP]"));
  EXPECT_EQ(end_token_id(marian, {"<|endoftext|>", false, false}), std::nullopt);
  // Marian's usual files: its own end token is </s>, so both orders agree.
  const MarianTokenizer usual(write_marian_dir(testing::scratch_dir() / "usual").string());
  EXPECT_EQ(end_token_id(usual, {"</s>", true}), 0);
  EXPECT_EQ(end_token_id(usual, {"</s>", true, false}), 0);
}

}  // namespace
}  // namespace attnkit::text
