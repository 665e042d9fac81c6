// The tokenizers of today's decoder families against Hugging Face tokenizers (the official Python
// binding, in the test venv scripts/setup.sh makes). hf_decoder_families_reference.py trains a
// stand-in for each family -- a small BPE model in the family's published tokenizer.json format:
// Llama 3 and Qwen2 (byte-level BPE behind a Split regex with lookahead), SmolLM2 (Digits then
// ByteLevel), Llama 2 / Mistral / Gemma (SentencePiece-style BPE with byte fallback, Prepend and
// Replace normalisers or Metaspace, ByteFallback / Fuse / Strip decoders) -- and encodes held-out
// text. Ids with and without special tokens, offsets and both decodes must be identical. Variants
// of the Llama 3 stand-in cover every Split behaviour (inverted or not), a literal Split and Digits.
#include <gtest/gtest.h>

#include "attnkit/error.h"
#include "attnkit/text/bpe.h"
#include "attnkit/text/byte_level_bpe.h"
#include "attnkit/text/tokenizer_json.h"
#include "reference_support.h"

namespace attnkit::text {
namespace {

using testing::fs::path;

Tokenizer load_family(const nlohmann::json& config) {
  return read_tokenizer_json((path(config.at("dir").get<std::string>()) / "tokenizer.json").string());
}

// Every case of `config`: ids, offsets, decode (reference_support.h), and ids without specials, decode
// with them.
void expect_family_matches(const Tokenizer& tokenizer, const nlohmann::json& config) {
  testing::expect_peer_cases(tokenizer, config, [&](const nlohmann::json& item, const std::string& text, const Encoding& encoding,
                                                    const std::string& what) {
    EXPECT_EQ(tokenizer.encode(text, false).ids, item.at("ids_plain").get<std::vector<uint32_t>>()) << what;
    EXPECT_EQ(tokenizer.decode(encoding.ids, false), item.at("decoded_all").get<std::string>()) << what;
  });
}

TEST(DecoderFamiliesReference, EveryFamilyMatchesHuggingFaceOnHeldOutText) {
  ATTNKIT_REQUIRE_PEER_REFERENCE(ref, "hf_decoder_families_reference.py");
  std::vector<std::string> names;
  for (const auto& config : ref->at("configs")) names.push_back(config.at("name").get<std::string>());
  names.resize(std::min<size_t>(names.size(), 7));
  EXPECT_EQ(names, (std::vector<std::string>{"llama3", "qwen2", "smollm2", "llama2", "mistral", "gemma", "split_removed"}));
  EXPECT_EQ(ref->at("configs").size(), 17u);  // the six families, ten Split behaviours, literal + Digits
  for (const auto& config : ref->at("configs")) {
    SCOPED_TRACE(config.at("name").get<std::string>());
    EXPECT_GE(config.at("cases").size(), 300u);
    const Tokenizer tokenizer = load_family(config);
    expect_family_matches(tokenizer, config);
  }
}

// Rust's String::from_utf8_lossy, which HF's ByteLevel decoder ends with: each maximal prefix of
// a valid sequence that is cut short, or each other invalid byte, becomes one U+FFFD.
std::string utf8_lossy(const std::string& bytes) {
  std::string out;
  size_t i = 0;
  while (i < bytes.size()) {
    const auto b = static_cast<unsigned char>(bytes[i]);
    size_t need = 0;
    unsigned char low = 0x80, high = 0xBF;  // the range of the second byte
    if (b < 0x80) {
      out += bytes[i++];
      continue;
    } else if (b >= 0xC2 && b <= 0xDF) {
      need = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
      need = 2;
      if (b == 0xE0) low = 0xA0;
      if (b == 0xED) high = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      need = 3;
      if (b == 0xF0) low = 0x90;
      if (b == 0xF4) high = 0x8F;
    }
    size_t j = i + 1;
    size_t got = 0;
    while (got < need && j < bytes.size()) {
      const auto c = static_cast<unsigned char>(bytes[j]);
      if (c < (got == 0 ? low : 0x80) || c > (got == 0 ? high : 0xBF)) break;
      ++j;
      ++got;
    }
    if (need > 0 && got == need) {
      out.append(bytes, i, j - i);
    } else {
      out += "\xEF\xBF\xBD";
    }
    i = j;
  }
  return out;
}

TEST(DecoderFamiliesReference, RandomIdsDecodeAsHuggingFaceDecodesThem) {
  ATTNKIT_REQUIRE_PEER_REFERENCE(ref, "hf_decoder_families_reference.py");
  for (const auto& config : ref->at("configs")) {
    const Tokenizer tokenizer = load_family(config);
    // Byte-level decoders give the raw bytes (decode(encode(x)) == x for any bytes); HF gives them
    // as a Rust string, with U+FFFD for what is not UTF-8. Compared as HF gives them.
    const bool byte_level = dynamic_cast<const ByteLevelBpe*>(tokenizer.parts().model.get()) != nullptr;
    auto as_hf = [&](const std::string& text) { return byte_level ? utf8_lossy(text) : text; };
    ASSERT_GE(config.at("decodes").size(), 60u);
    for (const auto& item : config.at("decodes")) {
      const auto ids = item.at("ids").get<std::vector<uint32_t>>();
      const std::string what = config.at("name").get<std::string>() + ": " + item.at("ids").dump();
      EXPECT_EQ(as_hf(tokenizer.decode(ids)), item.at("decoded").get<std::string>()) << what;
      EXPECT_EQ(as_hf(tokenizer.decode(ids, false)), item.at("decoded_all").get<std::string>()) << what;
    }
  }
}

TEST(DecoderFamiliesReference, ModelsAreTheKindTheFamilyNeeds) {
  ATTNKIT_REQUIRE_PEER_REFERENCE(ref, "hf_decoder_families_reference.py");
  for (const auto& config : ref->at("configs")) {
    const std::string name = config.at("name").get<std::string>();
    const Tokenizer tokenizer = load_family(config);
    const bool sentencepiece = name == "llama2" || name == "mistral" || name == "gemma";
    EXPECT_EQ(dynamic_cast<const Bpe*>(tokenizer.parts().model.get()) != nullptr, sentencepiece) << name;
    EXPECT_EQ(dynamic_cast<const ByteLevelBpe*>(tokenizer.parts().model.get()) != nullptr, !sentencepiece) << name;
    if (!sentencepiece) continue;
    // The held-out text must reach the byte fallback (<0xNN> ids 3.. of Llama 2, 6.. of Gemma) and
    // decode those bytes back.
    const auto first_byte = tokenizer.token_to_id("<0x00>");
    ASSERT_TRUE(first_byte.has_value()) << name;
    size_t fallbacks = 0;
    for (const auto& item : config.at("cases")) {
      for (uint32_t id : item.at("ids").get<std::vector<uint32_t>>()) fallbacks += id >= *first_byte && id < *first_byte + 256;
    }
    EXPECT_GE(fallbacks, 50u) << name;
    EXPECT_EQ(tokenizer.special_ids().unknown, tokenizer.token_to_id("<unk>")) << name;
  }
}

TEST(DecoderFamiliesReference, SaveLoadKeepsFileAndIds) {
  ATTNKIT_REQUIRE_PEER_REFERENCE(ref, "hf_decoder_families_reference.py");
  for (const auto& config : ref->at("configs")) {
    SCOPED_TRACE(config.at("name").get<std::string>());
    const Tokenizer first = load_family(config);
    const std::string saved = tokenizer_to_json_string(first);
    const Tokenizer second = tokenizer_from_json_string(saved);
    EXPECT_EQ(tokenizer_to_json_string(second), saved);
    expect_family_matches(second, config);
    // The parts are written as HF writes them (the model's merges as pairs, HF >= 0.20's form).
    const auto hf = nlohmann::json::parse(testing::read_all(path(config.at("dir").get<std::string>()) / "tokenizer.json"));
    const auto ours = nlohmann::json::parse(saved);
    for (const char* part : {"normalizer", "pre_tokenizer", "post_processor", "decoder", "added_tokens"}) {
      EXPECT_EQ(ours.at(part), hf.at(part)) << part;
    }
    EXPECT_EQ(ours.at("model").at("vocab"), hf.at("model").at("vocab"));
  }
}

TEST(DecoderFamiliesReference, BatchEncodingMatchesOneByOne) {
  ATTNKIT_REQUIRE_PEER_REFERENCE(ref, "hf_decoder_families_reference.py");
  for (const auto& config : ref->at("configs")) {
    const Tokenizer tokenizer = load_family(config);
    std::vector<EncodeInput> inputs;
    for (const auto& item : config.at("cases")) inputs.push_back({item.at("text").get<std::string>(), std::nullopt});
    const auto batch = tokenizer.encode_batch(inputs, 2);
    for (size_t i = 0; i < inputs.size(); ++i)
      EXPECT_EQ(batch[i].ids, config.at("cases").at(i).at("ids").get<std::vector<uint32_t>>()) << config.at("name");
  }
}

}  // namespace
}  // namespace attnkit::text
