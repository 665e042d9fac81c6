#include "attnkit/text/tokenizer_json.h"

#include <cstdint>

#include <fmt/format.h>

#include <limits>

#include <nlohmann/json.hpp>

#include <cstring>

#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/text/bpe.h"
#include "attnkit/text/byte_level_bpe.h"
#include "attnkit/text/unigram.h"
#include "attnkit/text/unicode.h"
#include "attnkit/text/wordpiece.h"
#include "text_file.h"
#include "vocabulary_json.h"

namespace attnkit::text {
namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

// Reader errors carry no file name; tokenizer_from_json_string adds it.
[[noreturn]] void fail(const std::string& message) { throw Error(message); }

// A non-negative integer that fits T. nlohmann's get<uint32_t>() converts a float or a negative
// number without a check (1e41 -> uint32_t is undefined behaviour: a fuzz finding).
template <typename T>
T unsigned_value(const json& value, const std::string& what) {
  if (!value.is_number_unsigned() || value.get<uint64_t>() > uint64_t{std::numeric_limits<T>::max()})
    fail(fmt::format("{}: expected an integer in [0, {}], got {}", what, std::numeric_limits<T>::max(),
                     value.is_number() ? value.dump() : std::string(value.type_name())));
  return static_cast<T>(value.get<uint64_t>());
}

std::string type_of(const json& node, const char* part) {
  if (!node.is_object()) fail(fmt::format("{} is not an object", part));
  auto it = node.find("type");
  if (it == node.end() || !it->is_string()) fail(fmt::format("{} has no \"type\"", part));
  return it->get<std::string>();
}

template <typename T>
T value_or(const json& node, const char* key, T fallback) {
  auto it = node.find(key);
  if (it == node.end() || it->is_null()) return fallback;
  return it->get<T>();
}

// A string member that may be absent or null.
std::optional<std::string> optional_string(const json& node, const char* key, const std::string& part) {
  auto it = node.find(key);
  if (it == node.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) fail(fmt::format("{}: \"{}\" is not a string", part, key));
  return it->get<std::string>();
}

// {"String": s} or {"Regex": r}: the pattern and whether it is a regex.
std::pair<std::string, bool> read_pattern(const json& node, const std::string& part) {
  auto it = node.find("pattern");
  if (it == node.end()) fail(fmt::format("{}: \"pattern\" is missing", part));
  const json& pattern = *it;
  const bool regex = pattern.is_object() && pattern.contains("Regex");
  if (!pattern.is_object() || !(regex || pattern.contains("String")) || !pattern.at(regex ? "Regex" : "String").is_string())
    fail(fmt::format("{}: pattern is neither {{\"String\": s}} nor {{\"Regex\": r}}", part));
  return {pattern.at(regex ? "Regex" : "String").get<std::string>(), regex};
}

const json& required(const json& node, const char* key, const std::string& part) {
  auto it = node.find(key);
  if (it == node.end()) fail(fmt::format("{}: \"{}\" is missing", part, key));
  return *it;
}

std::string required_string(const json& node, const char* key, const std::string& part) {
  const json& value = required(node, key, part);
  if (!value.is_string()) fail(fmt::format("{}: \"{}\" is not a string", part, key));
  return value.get<std::string>();
}

// Whether a pre_tokenizer node is ByteLevel or a Sequence whose last step is (the model is then
// byte-level BPE).
bool json_ends_in_byte_level(const json& node) {
  if (!node.is_object()) return false;
  auto type = node.find("type");
  if (type == node.end() || !type->is_string()) return false;
  if (*type == "ByteLevel") return true;
  auto list = node.find("pretokenizers");
  if (*type != "Sequence" || list == node.end() || !list->is_array() || list->empty()) return false;
  return json_ends_in_byte_level(list->back());
}

// ---- base64 (Precompiled charsmaps) ----------------------------------------------------------
constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64_decode(const std::string& text, const char* part) {
  std::string out;
  out.reserve(text.size() / 4 * 3);
  uint32_t buffer = 0;
  int bits = 0;
  size_t padding = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '=') {
      ++padding;
      continue;
    }
    const char* found = c == '\0' ? nullptr : std::strchr(kBase64, c);
    if (found == nullptr || padding > 0) fail(fmt::format("{} is not base64 (character {} of {})", part, i, text.size()));
    buffer = (buffer << 6) | static_cast<uint32_t>(found - kBase64);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((buffer >> bits) & 0xFF));
    }
  }
  if ((text.size() % 4) != 0 || padding > 2) fail(fmt::format("{} is not base64 (length {} is not a multiple of 4)", part, text.size()));
  return out;
}

std::string base64_encode(const std::string& bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t group = static_cast<unsigned char>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) group |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) group |= static_cast<unsigned char>(bytes[i + 2]);
    out.push_back(kBase64[(group >> 18) & 63]);
    out.push_back(kBase64[(group >> 12) & 63]);
    out.push_back(i + 1 < bytes.size() ? kBase64[(group >> 6) & 63] : '=');
    out.push_back(i + 2 < bytes.size() ? kBase64[group & 63] : '=');
  }
  return out;
}

char32_t read_replacement_char(const json& node, const char* part) {
  const std::string text = value_or<std::string>(node, "replacement", "\u2581");
  const std::u32string chars = unicode::decode_utf8(text, unicode::InvalidUtf8::kReplace);
  if (chars.size() != 1) fail(fmt::format("{}: replacement '{}' is not one character", part, text));
  return chars[0];
}

std::string utf8_of(char32_t c) {
  std::string out;
  unicode::append_utf8(out, c);
  return out;
}

std::string read_prepend_scheme(const json& node, const char* part) {
  std::string scheme = value_or<std::string>(node, "prepend_scheme", "always");
  if (scheme != "always" && scheme != "first" && scheme != "never") {
    fail(fmt::format("{}: prepend_scheme \"{}\" is not always, first or never", part, scheme));
  }
  return scheme;
}

// ---- model ---------------------------------------------------------------------------------
Vocabulary read_model_vocabulary(const json& model) {
  const json& vocab = model.at("vocab");
  if (!vocab.is_object()) fail("model.vocab is not an object of token -> id");
  std::vector<std::pair<std::string, uint32_t>> entries;
  entries.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_unsigned() || id.get<uint64_t>() > UINT32_MAX)
      fail(fmt::format("model.vocab: the id of '{}' is {}, not an integer in [0, 2^32)", token, id.dump()));
    entries.emplace_back(token, id.get<uint32_t>());
  }
  return Vocabulary::from_pairs(entries);
}

std::shared_ptr<const Model> read_model(const json& model, bool byte_level) {
  if (!model.is_object()) fail("\"model\" is missing or not an object");
  std::string type = model.contains("type") ? model.at("type").get<std::string>() : (model.contains("merges") ? "BPE" : "WordPiece");
  if (type == "WordPiece") {
    WordPieceOptions options;
    options.unk_token = value_or<std::string>(model, "unk_token", options.unk_token);
    options.continuing_subword_prefix = value_or<std::string>(model, "continuing_subword_prefix", options.continuing_subword_prefix);
    options.max_input_chars_per_word = value_or<size_t>(model, "max_input_chars_per_word", options.max_input_chars_per_word);
    return std::make_shared<WordPiece>(read_model_vocabulary(model), options);
  }
  if (type == "BPE") {
    if (value_or<double>(model, "dropout", 0.0) != 0.0) fail("BPE model: dropout is not supported");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      if (optional_string(model, key, "BPE model").value_or("").size() > 0) fail(fmt::format("BPE model: \"{}\" is not supported", key));
    }
    Vocabulary vocabulary = read_model_vocabulary(model);
    std::vector<Merge> merges;
    const json& list = required(model, "merges", "BPE model");
    if (!list.is_array()) fail("BPE model: \"merges\" is not an array");
    merges.reserve(list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      const json& item = list[i];
      Merge merge;
      if (item.is_string()) {
        const std::string text = item.get<std::string>();
        size_t space = text.find(' ');
        if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
          fail(fmt::format("model.merges[{}] '{}' is not two tokens separated by one space", i, text));
        }
        merge = {text.substr(0, space), text.substr(space + 1)};
      } else if (item.is_array() && item.size() == 2 && item[0].is_string() && item[1].is_string()) {
        merge = {item[0].get<std::string>(), item[1].get<std::string>()};
      } else {
        fail(fmt::format("model.merges[{}] is neither \"a b\" nor [\"a\", \"b\"]", i));
      }
      if (auto reason = invalid_merge_reason(vocabulary, merge)) {
        fail(fmt::format("model.merges[{}] ('{} {}'): {}", i, merge.left, merge.right, *reason));
      }
      merges.push_back(std::move(merge));
    }
    if (!byte_level) {
      BpeOptions options;
      options.unk_token = optional_string(model, "unk_token", "BPE model");
      options.fuse_unk = value_or<bool>(model, "fuse_unk", false);
      options.byte_fallback = value_or<bool>(model, "byte_fallback", false);
      options.ignore_merges = value_or<bool>(model, "ignore_merges", false);
      return std::make_shared<Bpe>(std::move(vocabulary), std::move(merges), std::move(options));
    }
    // Byte-level: every byte has a token, so there is no unknown token or byte fallback to use.
    if (optional_string(model, "unk_token", "BPE model").value_or("").size() > 0)
      fail("BPE model: \"unk_token\" is not supported with the ByteLevel pre_tokenizer");
    if (value_or<bool>(model, "byte_fallback", false)) fail("BPE model: byte_fallback is not supported with the ByteLevel pre_tokenizer");
    ByteLevelBpeOptions options;
    options.ignore_merges = value_or<bool>(model, "ignore_merges", false);
    return std::make_shared<ByteLevelBpe>(std::move(vocabulary), std::move(merges), options);
  }
  if (type == "Unigram") {
    const json& vocab = model.at("vocab");
    if (!vocab.is_array()) fail("Unigram model: vocab is not an array of [piece, score]");
    std::vector<UnigramPiece> pieces;
    pieces.reserve(vocab.size());
    for (size_t i = 0; i < vocab.size(); ++i) {
      const json& item = vocab[i];
      if (!item.is_array() || item.size() != 2 || !item[0].is_string()) {
        fail(fmt::format("Unigram model: vocab[{}] is not [piece, score]", i));
      }
      if (!item[1].is_number()) fail(fmt::format("Unigram model: vocab[{}] ('{}') has a score that is not a number", i, item[0].get<std::string>()));
      pieces.push_back({item[0].get<std::string>(), item[1].get<double>()});
    }
    std::optional<uint32_t> unk_id;
    if (model.contains("unk_id") && !model.at("unk_id").is_null()) {
      unk_id = unsigned_value<uint32_t>(model.at("unk_id"), "Unigram model: unk_id");
    }
    return std::make_shared<Unigram>(std::move(pieces), unk_id, value_or<bool>(model, "byte_fallback", false));
  }
  fail(fmt::format("model type \"{}\" is not supported (WordPiece, BPE or Unigram)", type));
}

ordered_json write_model(const Model& model) {
  ordered_json out;
  if (const auto* wordpiece = dynamic_cast<const WordPiece*>(&model)) {
    out["type"] = "WordPiece";
    out["unk_token"] = wordpiece->options().unk_token;
    out["continuing_subword_prefix"] = wordpiece->options().continuing_subword_prefix;
    out["max_input_chars_per_word"] = wordpiece->options().max_input_chars_per_word;
    out["vocab"] = detail::vocabulary_to_json(wordpiece->vocabulary());
    return out;
  }
  if (const auto* unigram = dynamic_cast<const Unigram*>(&model)) {
    out["type"] = "Unigram";
    out["unk_id"] = unigram->unk_id() ? ordered_json(*unigram->unk_id()) : ordered_json(nullptr);
    ordered_json vocab = ordered_json::array();
    for (const auto& piece : unigram->pieces()) vocab.push_back(ordered_json::array({piece.piece, piece.score}));
    out["vocab"] = std::move(vocab);
    out["byte_fallback"] = unigram->byte_fallback();
    return out;
  }
  if (const auto* bpe = dynamic_cast<const Bpe*>(&model)) {  // as HF writes it
    out["type"] = "BPE";
    out["dropout"] = nullptr;
    out["unk_token"] = bpe->options().unk_token ? ordered_json(*bpe->options().unk_token) : ordered_json(nullptr);
    out["continuing_subword_prefix"] = nullptr;
    out["end_of_word_suffix"] = nullptr;
    out["fuse_unk"] = bpe->options().fuse_unk;
    out["byte_fallback"] = bpe->options().byte_fallback;
    if (bpe->options().ignore_merges) out["ignore_merges"] = true;
    out["vocab"] = detail::vocabulary_to_json(bpe->vocabulary());
    ordered_json merges = ordered_json::array();
    for (const auto& merge : bpe->merges()) merges.push_back(ordered_json::array({merge.left, merge.right}));
    out["merges"] = std::move(merges);
    return out;
  }
  const auto& bpe = dynamic_cast<const ByteLevelBpe&>(model);
  out["type"] = "BPE";
  out["dropout"] = nullptr;
  out["unk_token"] = nullptr;
  out["continuing_subword_prefix"] = nullptr;
  out["end_of_word_suffix"] = nullptr;
  out["fuse_unk"] = false;
  out["byte_fallback"] = false;
  out["ignore_merges"] = bpe.options().ignore_merges;
  out["vocab"] = detail::vocabulary_to_json(bpe.vocabulary());
  ordered_json merges = ordered_json::array();
  for (const auto& merge : bpe.merges()) merges.push_back(ordered_json::array({merge.left, merge.right}));
  out["merges"] = std::move(merges);
  return out;
}

// ---- normalizer, pre-tokenizer -------------------------------------------------------------
void read_normalizer_steps(const json& node, std::vector<NormalizerStep>& steps, bool& sequence) {
  std::string type = type_of(node, "normalizer");
  if (type == "Sequence") {
    sequence = true;
    const json& list = node.at("normalizers");
    if (!list.is_array()) fail("normalizer Sequence: \"normalizers\" is not an array");
    for (const json& item : list) read_normalizer_steps(item, steps, sequence);
    return;
  }
  if (type == "BertNormalizer") {
    BertNormalizer normalizer;
    normalizer.clean_text = value_or<bool>(node, "clean_text", true);
    normalizer.handle_chinese_chars = value_or<bool>(node, "handle_chinese_chars", true);
    normalizer.lowercase = value_or<bool>(node, "lowercase", true);
    if (node.contains("strip_accents") && !node.at("strip_accents").is_null()) {
      normalizer.strip_accents = node.at("strip_accents").get<bool>();
    }
    steps.emplace_back(normalizer);
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    using Form = UnicodeNormalizer::Form;
    steps.emplace_back(UnicodeNormalizer{type == "NFC" ? Form::kNfc : type == "NFD" ? Form::kNfd : type == "NFKC" ? Form::kNfkc : Form::kNfkd});
  } else if (type == "Lowercase") {
    steps.emplace_back(LowercaseNormalizer{});
  } else if (type == "StripAccents") {
    steps.emplace_back(StripAccentsNormalizer{});
  } else if (type == "Strip") {
    steps.emplace_back(StripNormalizer{value_or<bool>(node, "strip_left", true), value_or<bool>(node, "strip_right", true)});
  } else if (type == "Nmt") {
    steps.emplace_back(NmtNormalizer{});
  } else if (type == "Replace") {
    auto [pattern, regex] = read_pattern(node, "Replace normalizer");
    steps.emplace_back(make_replace(std::move(pattern), regex, required_string(node, "content", "Replace normalizer")));
  } else if (type == "Prepend") {
    steps.emplace_back(PrependNormalizer{required_string(node, "prepend", "Prepend normalizer")});
  } else if (type == "Precompiled") {
    const json& charsmap = node.at("precompiled_charsmap");
    if (!charsmap.is_string()) fail("Precompiled normalizer: precompiled_charsmap is not a base64 string");
    steps.emplace_back(PrecompiledNormalizer{std::make_shared<PrecompiledCharsmap>(base64_decode(charsmap.get<std::string>(), "precompiled_charsmap"))});
  } else {
    fail(fmt::format("normalizer type \"{}\" is not supported (BertNormalizer, Sequence, NFC, NFD, NFKC, NFKD, Lowercase, "
                     "StripAccents, Strip, Nmt, Replace, Prepend, Precompiled or null)", type));
  }
}

std::optional<Normalizer> read_normalizer(const json& node) {
  if (node.is_null()) return std::nullopt;
  Normalizer normalizer;
  read_normalizer_steps(node, normalizer.steps, normalizer.sequence);
  return normalizer;
}

ordered_json write_normalizer_step(const NormalizerStep& step) {
  ordered_json out;
  if (const auto* bert = std::get_if<BertNormalizer>(&step)) {
    out["type"] = "BertNormalizer";
    out["clean_text"] = bert->clean_text;
    out["handle_chinese_chars"] = bert->handle_chinese_chars;
    out["strip_accents"] = bert->strip_accents ? ordered_json(*bert->strip_accents) : ordered_json(nullptr);
    out["lowercase"] = bert->lowercase;
  } else if (const auto* form = std::get_if<UnicodeNormalizer>(&step)) {
    static const char* kNames[] = {"NFC", "NFD", "NFKC", "NFKD"};
    out["type"] = kNames[static_cast<int>(form->form)];
  } else if (std::holds_alternative<LowercaseNormalizer>(step)) {
    out["type"] = "Lowercase";
  } else if (std::holds_alternative<StripAccentsNormalizer>(step)) {
    out["type"] = "StripAccents";
  } else if (const auto* strip = std::get_if<StripNormalizer>(&step)) {
    out["type"] = "Strip";
    out["strip_left"] = strip->left;
    out["strip_right"] = strip->right;
  } else if (std::holds_alternative<NmtNormalizer>(step)) {
    out["type"] = "Nmt";
  } else if (const auto* replace = std::get_if<ReplaceNormalizer>(&step)) {
    out["type"] = "Replace";
    out["pattern"] = {{replace->regex ? "Regex" : "String", replace->pattern}};
    out["content"] = replace->content;
  } else if (const auto* prepend = std::get_if<PrependNormalizer>(&step)) {
    out["type"] = "Prepend";
    out["prepend"] = prepend->prepend;
  } else {
    out["type"] = "Precompiled";
    out["precompiled_charsmap"] = base64_encode(std::get<PrecompiledNormalizer>(step).charsmap->blob());
  }
  return out;
}

ordered_json write_normalizer(const std::optional<Normalizer>& normalizer) {
  if (!normalizer) return nullptr;
  if (!normalizer->sequence && normalizer->steps.size() == 1) return write_normalizer_step(normalizer->steps[0]);
  ordered_json out;
  out["type"] = "Sequence";
  ordered_json list = ordered_json::array();
  for (const auto& step : normalizer->steps) list.push_back(write_normalizer_step(step));
  out["normalizers"] = std::move(list);
  return out;
}

PreTokenizer read_pre_tokenizer(const json& node) {
  if (node.is_null()) return NoPreTokenizer{};
  std::string type = type_of(node, "pre_tokenizer");
  if (type == "BertPreTokenizer") return BertPreTokenizer{};
  if (type == "ByteLevel") {
    ByteLevelPreTokenizer pre_tokenizer;
    pre_tokenizer.add_prefix_space = value_or<bool>(node, "add_prefix_space", true);
    pre_tokenizer.trim_offsets = value_or<bool>(node, "trim_offsets", true);
    pre_tokenizer.use_regex = value_or<bool>(node, "use_regex", true);
    return pre_tokenizer;
  }
  if (type == "Sequence") {
    const json& list = required(node, "pretokenizers", "pre_tokenizer Sequence");
    if (!list.is_array()) fail("pre_tokenizer Sequence: \"pretokenizers\" is not an array");
    if (list.size() == 2 && type_of(list[0], "pre_tokenizer") == "WhitespaceSplit" && type_of(list[1], "pre_tokenizer") == "Metaspace") {
      PreTokenizer inner = read_pre_tokenizer(list[1]);  // older T5 files
      std::get<MetaspacePreTokenizer>(inner).whitespace_split = true;
      return inner;
    }
    std::vector<PreTokenizer> steps;
    for (const json& item : list) {
      if (type_of(item, "pre_tokenizer") == "WhitespaceSplit") fail("pre_tokenizer Sequence: WhitespaceSplit is supported only before Metaspace");
      steps.push_back(read_pre_tokenizer(item));
    }
    return make_sequence(std::move(steps));
  }
  if (type == "Metaspace") {
    MetaspacePreTokenizer metaspace;
    metaspace.replacement = read_replacement_char(node, "Metaspace pre_tokenizer");
    metaspace.add_prefix_space = value_or<bool>(node, "add_prefix_space", true);
    metaspace.prepend_scheme = read_prepend_scheme(node, "Metaspace pre_tokenizer");
    metaspace.split = value_or<bool>(node, "split", true);
    return metaspace;
  }
  if (type == "Split") {
    auto [pattern, regex] = read_pattern(node, "Split pre_tokenizer");
    const json& behavior_node = required(node, "behavior", "Split pre_tokenizer");
    const std::string behavior_name = behavior_node.is_string() ? behavior_node.get<std::string>() : behavior_node.dump();
    const auto behavior = split_behavior_from_string(behavior_name);
    if (!behavior) {
      fail(fmt::format("Split pre_tokenizer: behavior {} is not Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous",
                       behavior_node.dump()));
    }
    return make_split(std::move(pattern), regex, *behavior, value_or<bool>(node, "invert", false));
  }
  if (type == "Digits") return DigitsPreTokenizer{value_or<bool>(node, "individual_digits", false)};
  fail(fmt::format("pre_tokenizer type \"{}\" is not supported (BertPreTokenizer, ByteLevel, Metaspace, Split, Digits, "
                   "Sequence or null)", type));
}

ordered_json write_pre_tokenizer(const PreTokenizer& pre_tokenizer) {
  ordered_json out;
  if (std::holds_alternative<BertPreTokenizer>(pre_tokenizer)) {
    out["type"] = "BertPreTokenizer";
    return out;
  }
  if (const auto* metaspace = std::get_if<MetaspacePreTokenizer>(&pre_tokenizer)) {
    out["type"] = "Metaspace";
    out["replacement"] = utf8_of(metaspace->replacement);
    out["add_prefix_space"] = metaspace->add_prefix_space;
    out["prepend_scheme"] = metaspace->prepend_scheme;
    if (!metaspace->split) out["split"] = false;
    if (!metaspace->whitespace_split) return out;
    ordered_json sequence;
    sequence["type"] = "Sequence";
    sequence["pretokenizers"] = ordered_json::array({ordered_json{{"type", "WhitespaceSplit"}}, std::move(out)});
    return sequence;
  }
  if (std::holds_alternative<NoPreTokenizer>(pre_tokenizer)) return nullptr;
  if (const auto* split = std::get_if<SplitPreTokenizer>(&pre_tokenizer)) {
    out["type"] = "Split";
    out["pattern"] = {{split->regex ? "Regex" : "String", split->pattern}};
    out["behavior"] = split_behavior_name(split->behavior);
    out["invert"] = split->invert;
    return out;
  }
  if (const auto* digits = std::get_if<DigitsPreTokenizer>(&pre_tokenizer)) {
    out["type"] = "Digits";
    out["individual_digits"] = digits->individual_digits;
    return out;
  }
  if (const auto* sequence = std::get_if<SequencePreTokenizer>(&pre_tokenizer)) {
    out["type"] = "Sequence";
    ordered_json list = ordered_json::array();
    for (const auto& step : sequence->steps->steps) list.push_back(write_pre_tokenizer(step));
    out["pretokenizers"] = std::move(list);
    return out;
  }
  const auto& byte_level = std::get<ByteLevelPreTokenizer>(pre_tokenizer);
  out["type"] = "ByteLevel";
  out["add_prefix_space"] = byte_level.add_prefix_space;
  out["trim_offsets"] = byte_level.trim_offsets;
  out["use_regex"] = byte_level.use_regex;
  return out;
}

// ---- post-processor ------------------------------------------------------------------------
std::vector<TemplatePiece> read_template(const json& pieces, const char* name) {
  std::vector<TemplatePiece> out;
  for (const json& item : pieces) {
    TemplatePiece piece;
    if (item.contains("Sequence")) {
      const json& sequence = item.at("Sequence");
      const std::string id = sequence.at("id").get<std::string>();
      if (id != "A" && id != "B") fail(fmt::format("post_processor.{}: sequence id \"{}\" is not A or B", name, id));
      piece.is_sequence = true;
      piece.sequence = id == "A" ? 0 : 1;
      piece.type_id = unsigned_value<uint32_t>(sequence.at("type_id"), fmt::format("post_processor.{}: type_id", name));
    } else if (item.contains("SpecialToken")) {
      const json& special = item.at("SpecialToken");
      piece.special_token = special.at("id").get<std::string>();
      piece.type_id = unsigned_value<uint32_t>(special.at("type_id"), fmt::format("post_processor.{}: type_id", name));
    } else {
      fail(fmt::format("post_processor.{}: a piece is neither Sequence nor SpecialToken", name));
    }
    out.push_back(std::move(piece));
  }
  return out;
}

PostProcessor read_post_processor(const json& node) {
  if (node.is_null()) return {};
  std::string type = type_of(node, "post_processor");
  if (type == "BertProcessing") {
    const json& cls = node.at("cls");
    const json& sep = node.at("sep");
    return PostProcessor::bert(cls.at(0).get<std::string>(),
                               unsigned_value<uint32_t>(cls.at(1), "post_processor.cls"),
                               sep.at(0).get<std::string>(),
                               unsigned_value<uint32_t>(sep.at(1), "post_processor.sep"));
  }
  if (type == "ByteLevel") {
    return PostProcessor::byte_level(value_or<bool>(node, "trim_offsets", true), value_or<bool>(node, "add_prefix_space", true));
  }
  if (type == "RobertaProcessing") {
    const json& cls = node.at("cls");
    const json& sep = node.at("sep");
    return PostProcessor::roberta(cls.at(0).get<std::string>(), unsigned_value<uint32_t>(cls.at(1), "post_processor.cls"),
                                  sep.at(0).get<std::string>(), unsigned_value<uint32_t>(sep.at(1), "post_processor.sep"),
                                  value_or<bool>(node, "trim_offsets", true), value_or<bool>(node, "add_prefix_space", true));
  }
  if (type == "Sequence") {  // Llama 3's: ByteLevel (offsets), then the template
    const json& list = required(node, "processors", "post_processor Sequence");
    if (!list.is_array() || list.size() != 2 || type_of(list[0], "post_processor") != "ByteLevel" ||
        type_of(list[1], "post_processor") != "TemplateProcessing") {
      fail("post_processor Sequence: only [ByteLevel, TemplateProcessing] is supported");
    }
    PostProcessor processor = read_post_processor(list[1]);
    processor.byte_level_first = true;
    processor.trim_offsets = value_or<bool>(list[0], "trim_offsets", true);
    processor.add_prefix_space = value_or<bool>(list[0], "add_prefix_space", true);
    return processor;
  }
  if (type == "TemplateProcessing") {
    PostProcessor processor;
    processor.kind = PostProcessor::Kind::kTemplate;
    processor.single = read_template(node.at("single"), "single");
    processor.pair = read_template(node.at("pair"), "pair");
    for (const auto& [name, special] : node.at("special_tokens").items()) {
      std::vector<uint32_t> ids;
      for (const json& id : special.at("ids"))
        ids.push_back(unsigned_value<uint32_t>(id, "post_processor.special_tokens." + name + ".ids"));
      processor.special_tokens[name] = {std::move(ids), special.at("tokens").get<std::vector<std::string>>()};
    }
    return processor;
  }
  fail(fmt::format("post_processor type \"{}\" is not supported (BertProcessing, RobertaProcessing, TemplateProcessing, "
                   "ByteLevel, Sequence [ByteLevel, TemplateProcessing] or null)", type));
}

ordered_json write_template(const std::vector<TemplatePiece>& pieces) {
  ordered_json out = ordered_json::array();
  for (const auto& piece : pieces) {
    ordered_json body;
    body["id"] = piece.is_sequence ? (piece.sequence == 0 ? "A" : "B") : piece.special_token;
    body["type_id"] = piece.type_id;
    ordered_json item;
    item[piece.is_sequence ? "Sequence" : "SpecialToken"] = std::move(body);
    out.push_back(std::move(item));
  }
  return out;
}

ordered_json write_post_processor(const PostProcessor& processor) {
  ordered_json out;
  switch (processor.kind) {
    case PostProcessor::Kind::kNone:
      return nullptr;
    case PostProcessor::Kind::kByteLevel:
      out["type"] = "ByteLevel";
      out["add_prefix_space"] = processor.add_prefix_space;
      out["trim_offsets"] = processor.trim_offsets;
      out["use_regex"] = true;
      return out;
    case PostProcessor::Kind::kBert:
    case PostProcessor::Kind::kRoberta: {
      // [CLS] and [SEP] are the first and last pieces of the single-text template; RoBERTa's
      // processor adds its two offset flags.
      const bool roberta = processor.kind == PostProcessor::Kind::kRoberta;
      const std::string& cls = processor.single.front().special_token;
      const std::string& sep = processor.single.back().special_token;
      out["type"] = roberta ? "RobertaProcessing" : "BertProcessing";
      out["sep"] = ordered_json::array({sep, processor.special_tokens.at(sep).ids.at(0)});
      out["cls"] = ordered_json::array({cls, processor.special_tokens.at(cls).ids.at(0)});
      if (roberta) {
        out["trim_offsets"] = processor.trim_offsets;
        out["add_prefix_space"] = processor.add_prefix_space;
      }
      return out;
    }
    case PostProcessor::Kind::kTemplate: {
      if (processor.byte_level_first) {
        PostProcessor inner = processor;
        inner.byte_level_first = false;
        ordered_json byte_level;
        byte_level["type"] = "ByteLevel";
        byte_level["add_prefix_space"] = processor.add_prefix_space;
        byte_level["trim_offsets"] = processor.trim_offsets;
        byte_level["use_regex"] = true;
        out["type"] = "Sequence";
        out["processors"] = ordered_json::array({std::move(byte_level), write_post_processor(inner)});
        return out;
      }
      out["type"] = "TemplateProcessing";
      out["single"] = write_template(processor.single);
      out["pair"] = write_template(processor.pair);
      ordered_json specials = ordered_json::object();
      for (const auto& [name, special] : processor.special_tokens) {
        specials[name] = {{"id", name}, {"ids", special.ids}, {"tokens", special.tokens}};
      }
      out["special_tokens"] = std::move(specials);
      return out;
    }
  }
  return nullptr;
}

// ---- decoder, added tokens, truncation, padding ----------------------------------------------
Decoder read_decoder(const json& node, const Model& model) {
  if (node.is_null()) {
    if (dynamic_cast<const WordPiece*>(&model)) return WordPieceDecoder{};
    if (dynamic_cast<const Unigram*>(&model)) return MetaspaceDecoder{};
    if (dynamic_cast<const Bpe*>(&model)) return FuseDecoder{};
    return ByteLevelDecoder{};
  }
  std::string type = type_of(node, "decoder");
  if (type == "WordPiece") return WordPieceDecoder{value_or<std::string>(node, "prefix", "##"), value_or<bool>(node, "cleanup", true)};
  if (type == "ByteLevel") return ByteLevelDecoder{};
  if (type == "Metaspace") {
    return MetaspaceDecoder{read_replacement_char(node, "Metaspace decoder"), value_or<bool>(node, "add_prefix_space", true),
                            read_prepend_scheme(node, "Metaspace decoder")};
  }
  if (type == "Replace") {
    auto [pattern, regex] = read_pattern(node, "Replace decoder");
    return make_replace_decoder(std::move(pattern), regex, required_string(node, "content", "Replace decoder"));
  }
  if (type == "ByteFallback") return ByteFallbackDecoder{};
  if (type == "Fuse") return FuseDecoder{};
  if (type == "Strip") {
    const json& content = required(node, "content", "Strip decoder");
    const std::u32string chars =
        content.is_string() ? unicode::decode_utf8(content.get<std::string>(), unicode::InvalidUtf8::kReplace) : std::u32string();
    if (chars.size() != 1) fail(fmt::format("Strip decoder: content {} is not one character", content.dump()));
    return StripDecoder{chars[0], unsigned_value<size_t>(required(node, "start", "Strip decoder"), "Strip decoder: start"),
                        unsigned_value<size_t>(required(node, "stop", "Strip decoder"), "Strip decoder: stop")};
  }
  if (type == "Sequence") {
    const json& list = required(node, "decoders", "decoder Sequence");
    if (!list.is_array()) fail("decoder Sequence: \"decoders\" is not an array");
    std::vector<Decoder> steps;
    for (const json& item : list) steps.push_back(read_decoder(item, model));
    return make_decoder_sequence(std::move(steps));
  }
  fail(fmt::format("decoder type \"{}\" is not supported (WordPiece, ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip "
                   "or Sequence)", type));
}

ordered_json write_decoder(const Decoder& decoder) {
  ordered_json out;
  if (const auto* wordpiece = std::get_if<WordPieceDecoder>(&decoder)) {
    out["type"] = "WordPiece";
    out["prefix"] = wordpiece->prefix;
    out["cleanup"] = wordpiece->cleanup;
  } else if (const auto* metaspace = std::get_if<MetaspaceDecoder>(&decoder)) {
    out["type"] = "Metaspace";
    out["replacement"] = utf8_of(metaspace->replacement);
    out["add_prefix_space"] = metaspace->add_prefix_space;
    out["prepend_scheme"] = metaspace->prepend_scheme;
  } else if (const auto* replace = std::get_if<ReplaceDecoder>(&decoder)) {
    out["type"] = "Replace";
    out["pattern"] = {{replace->regex ? "Regex" : "String", replace->pattern}};
    out["content"] = replace->content;
  } else if (std::holds_alternative<ByteFallbackDecoder>(decoder)) {
    out["type"] = "ByteFallback";
  } else if (std::holds_alternative<FuseDecoder>(decoder)) {
    out["type"] = "Fuse";
  } else if (const auto* strip = std::get_if<StripDecoder>(&decoder)) {
    out["type"] = "Strip";
    out["content"] = utf8_of(strip->content);
    out["start"] = strip->start;
    out["stop"] = strip->stop;
  } else if (const auto* sequence = std::get_if<SequenceDecoder>(&decoder)) {
    out["type"] = "Sequence";
    ordered_json list = ordered_json::array();
    for (const auto& step : sequence->steps->steps) list.push_back(write_decoder(step));
    out["decoders"] = std::move(list);
  } else {
    out["type"] = "ByteLevel";
    out["add_prefix_space"] = true;
    out["trim_offsets"] = true;
    out["use_regex"] = true;
  }
  return out;
}

AddedVocabulary read_added_tokens(const json& node) {
  if (node.is_null()) return {};
  std::vector<AddedToken> tokens;
  for (const json& item : node) {
    AddedToken token;
    token.id = unsigned_value<uint32_t>(item.at("id"), "added_tokens: id");
    token.content = item.at("content").get<std::string>();
    token.special = value_or<bool>(item, "special", false);
    token.single_word = value_or<bool>(item, "single_word", false);
    token.lstrip = value_or<bool>(item, "lstrip", false);
    token.rstrip = value_or<bool>(item, "rstrip", false);
    token.normalized = value_or<bool>(item, "normalized", !token.special);
    tokens.push_back(std::move(token));
  }
  return AddedVocabulary(std::move(tokens));
}

ordered_json write_added_tokens(const AddedVocabulary& added) {
  ordered_json out = ordered_json::array();
  for (const auto& token : added.tokens()) {
    out.push_back({{"id", token.id}, {"content", token.content}, {"single_word", token.single_word},
                   {"lstrip", token.lstrip}, {"rstrip", token.rstrip}, {"normalized", token.normalized},
                   {"special", token.special}});
  }
  return out;
}

Side read_side(const json& node, const char* key) {
  std::string side = value_or<std::string>(node, key, "Right");
  if (side == "Right") return Side::kRight;
  if (side == "Left") return Side::kLeft;
  fail(fmt::format("{} \"{}\" is not Right or Left", key, side));
}

const char* side_name(Side side) { return side == Side::kLeft ? "Left" : "Right"; }

std::optional<TruncationOptions> read_truncation(const json& node) {
  if (node.is_null()) return std::nullopt;
  TruncationOptions options;
  options.max_length = unsigned_value<size_t>(node.at("max_length"), "truncation.max_length");
  options.strategy = truncation_strategy_from_string(value_or<std::string>(node, "strategy", "LongestFirst"));
  options.direction = read_side(node, "direction");
  options.stride = value_or<size_t>(node, "stride", 0);
  return options;
}

ordered_json write_truncation(const std::optional<TruncationOptions>& options) {
  if (!options) return nullptr;
  static const char* kStrategies[] = {"LongestFirst", "OnlyFirst", "OnlySecond"};
  return {{"direction", side_name(options->direction)}, {"max_length", options->max_length},
          {"strategy", kStrategies[static_cast<int>(options->strategy)]}, {"stride", options->stride}};
}

std::optional<PaddingOptions> read_padding(const json& node) {
  if (node.is_null()) return std::nullopt;
  PaddingOptions options;
  const json& strategy = node.at("strategy");
  if (strategy.is_object() && strategy.contains("Fixed")) {
    options.length = unsigned_value<size_t>(strategy.at("Fixed"), "padding.strategy.Fixed");
  } else if (!(strategy.is_string() && strategy.get<std::string>() == "BatchLongest")) {
    fail("padding.strategy is neither \"BatchLongest\" nor {\"Fixed\": n}");
  }
  options.direction = read_side(node, "direction");
  options.pad_to_multiple_of = value_or<size_t>(node, "pad_to_multiple_of", 0);
  options.pad_id = value_or<uint32_t>(node, "pad_id", 0);
  options.pad_type_id = value_or<uint32_t>(node, "pad_type_id", 0);
  options.pad_token = value_or<std::string>(node, "pad_token", "[PAD]");
  return options;
}

ordered_json write_padding(const std::optional<PaddingOptions>& options) {
  if (!options) return nullptr;
  ordered_json out;
  out["strategy"] = options->length ? ordered_json{{"Fixed", *options->length}} : ordered_json("BatchLongest");
  out["direction"] = side_name(options->direction);
  out["pad_to_multiple_of"] = options->pad_to_multiple_of ? ordered_json(options->pad_to_multiple_of) : ordered_json(nullptr);
  out["pad_id"] = options->pad_id;
  out["pad_type_id"] = options->pad_type_id;
  out["pad_token"] = options->pad_token;
  return out;
}

const json& member_or_null(const json& node, const char* key) {
  static const json null_value;
  auto it = node.find(key);
  return it == node.end() ? null_value : *it;
}

}  // namespace

Tokenizer tokenizer_from_json_string(const std::string& text, const std::string& source) {
  json root;
  try {
    root = json::parse(text);
  } catch (const std::exception& e) {  // json parse_error, or out_of_range for 1e400
    throw Error(fmt::format("{}: malformed JSON: {}", source, e.what()));
  }
  return tokenizer_from_json(root, source);
}

Tokenizer tokenizer_from_json(const json& root, const std::string& source) {
  try {
    if (!root.is_object()) fail("the top level is not a JSON object");
    TokenizerParts parts;
    parts.model = read_model(member_or_null(root, "model"), json_ends_in_byte_level(member_or_null(root, "pre_tokenizer")));
    parts.normalizer = read_normalizer(member_or_null(root, "normalizer"));
    parts.pre_tokenizer = read_pre_tokenizer(member_or_null(root, "pre_tokenizer"));
    parts.post_processor = read_post_processor(member_or_null(root, "post_processor"));
    parts.decoder = read_decoder(member_or_null(root, "decoder"), *parts.model);
    parts.added_tokens = read_added_tokens(member_or_null(root, "added_tokens"));
    parts.truncation = read_truncation(member_or_null(root, "truncation"));
    parts.padding = read_padding(member_or_null(root, "padding"));
    return Tokenizer(std::move(parts));
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: unexpected tokenizer.json content: {}", source, e.what()));
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", source, e.what()));
  }
}

std::string tokenizer_to_json_string(const Tokenizer& tokenizer, bool pretty) {
  const TokenizerParts& parts = tokenizer.parts();
  ordered_json root;
  root["version"] = "1.0";
  root["truncation"] = write_truncation(parts.truncation);
  root["padding"] = write_padding(parts.padding);
  root["added_tokens"] = write_added_tokens(parts.added_tokens);
  root["normalizer"] = write_normalizer(parts.normalizer);
  root["pre_tokenizer"] = write_pre_tokenizer(parts.pre_tokenizer);
  root["post_processor"] = write_post_processor(parts.post_processor);
  root["decoder"] = write_decoder(parts.decoder);
  root["model"] = write_model(*parts.model);
  return root.dump(pretty ? 2 : -1, ' ', false, json::error_handler_t::strict) + "\n";
}

Tokenizer read_tokenizer_json(const std::string& path) { return tokenizer_from_json_string(read_file(path), path); }

void write_tokenizer_json(const Tokenizer& tokenizer, const std::string& path, bool pretty) {
  detail::write_file(path, tokenizer_to_json_string(tokenizer, pretty));
}

}  // namespace attnkit::text
