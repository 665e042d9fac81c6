#include "attnkit/text/tokenizer_json.h"

#include <cstdint>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/text/byte_level_bpe.h"
#include "attnkit/text/wordpiece.h"
#include "text_file.h"
#include "vocabulary_json.h"

namespace attnkit::text {
namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

// Reader errors carry no file name; tokenizer_from_json_string adds it.
[[noreturn]] void fail(const std::string& message) { throw Error(message); }

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

std::shared_ptr<const Model> read_model(const json& model) {
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
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix", "unk_token"}) {
      if (!value_or<std::string>(model, key, "").empty()) fail(fmt::format("BPE model: \"{}\" is not supported (byte-level BPE only)", key));
    }
    if (value_or<double>(model, "dropout", 0.0) != 0.0) fail("BPE model: dropout is not supported");
    if (value_or<bool>(model, "byte_fallback", false)) fail("BPE model: byte_fallback is not supported");
    Vocabulary vocabulary = read_model_vocabulary(model);
    std::vector<Merge> merges;
    const json& list = model.at("merges");
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
      } else if (item.is_array() && item.size() == 2) {
        merge = {item[0].get<std::string>(), item[1].get<std::string>()};
      } else {
        fail(fmt::format("model.merges[{}] is neither \"a b\" nor [\"a\", \"b\"]", i));
      }
      if (auto reason = invalid_merge_reason(vocabulary, merge)) {
        fail(fmt::format("model.merges[{}] ('{} {}'): {}", i, merge.left, merge.right, *reason));
      }
      merges.push_back(std::move(merge));
    }
    ByteLevelBpeOptions options;
    options.ignore_merges = value_or<bool>(model, "ignore_merges", false);
    return std::make_shared<ByteLevelBpe>(std::move(vocabulary), std::move(merges), options);
  }
  fail(fmt::format("model type \"{}\" is not supported (WordPiece or BPE)", type));
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
std::optional<BertNormalizer> read_normalizer(const json& node) {
  if (node.is_null()) return std::nullopt;
  std::string type = type_of(node, "normalizer");
  if (type != "BertNormalizer") fail(fmt::format("normalizer type \"{}\" is not supported (BertNormalizer or null)", type));
  BertNormalizer normalizer;
  normalizer.clean_text = value_or<bool>(node, "clean_text", true);
  normalizer.handle_chinese_chars = value_or<bool>(node, "handle_chinese_chars", true);
  normalizer.lowercase = value_or<bool>(node, "lowercase", true);
  if (node.contains("strip_accents") && !node.at("strip_accents").is_null()) {
    normalizer.strip_accents = node.at("strip_accents").get<bool>();
  }
  return normalizer;
}

ordered_json write_normalizer(const std::optional<BertNormalizer>& normalizer) {
  if (!normalizer) return nullptr;
  ordered_json out;
  out["type"] = "BertNormalizer";
  out["clean_text"] = normalizer->clean_text;
  out["handle_chinese_chars"] = normalizer->handle_chinese_chars;
  out["strip_accents"] = normalizer->strip_accents ? ordered_json(*normalizer->strip_accents) : ordered_json(nullptr);
  out["lowercase"] = normalizer->lowercase;
  return out;
}

PreTokenizer read_pre_tokenizer(const json& node) {
  if (node.is_null()) fail("pre_tokenizer is null; BertPreTokenizer or ByteLevel is needed");
  std::string type = type_of(node, "pre_tokenizer");
  if (type == "BertPreTokenizer") return BertPreTokenizer{};
  if (type == "ByteLevel") {
    ByteLevelPreTokenizer pre_tokenizer;
    pre_tokenizer.add_prefix_space = value_or<bool>(node, "add_prefix_space", true);
    pre_tokenizer.trim_offsets = value_or<bool>(node, "trim_offsets", true);
    pre_tokenizer.use_regex = value_or<bool>(node, "use_regex", true);
    return pre_tokenizer;
  }
  fail(fmt::format("pre_tokenizer type \"{}\" is not supported (BertPreTokenizer or ByteLevel)", type));
}

ordered_json write_pre_tokenizer(const PreTokenizer& pre_tokenizer) {
  ordered_json out;
  if (std::holds_alternative<BertPreTokenizer>(pre_tokenizer)) {
    out["type"] = "BertPreTokenizer";
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
      piece.type_id = sequence.at("type_id").get<uint32_t>();
    } else if (item.contains("SpecialToken")) {
      const json& special = item.at("SpecialToken");
      piece.special_token = special.at("id").get<std::string>();
      piece.type_id = special.at("type_id").get<uint32_t>();
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
    return PostProcessor::bert(cls.at(0).get<std::string>(), cls.at(1).get<uint32_t>(), sep.at(0).get<std::string>(),
                               sep.at(1).get<uint32_t>());
  }
  if (type == "ByteLevel") {
    return PostProcessor::byte_level(value_or<bool>(node, "trim_offsets", true), value_or<bool>(node, "add_prefix_space", true));
  }
  if (type == "TemplateProcessing") {
    PostProcessor processor;
    processor.kind = PostProcessor::Kind::kTemplate;
    processor.single = read_template(node.at("single"), "single");
    processor.pair = read_template(node.at("pair"), "pair");
    for (const auto& [name, special] : node.at("special_tokens").items()) {
      processor.special_tokens[name] = {special.at("ids").get<std::vector<uint32_t>>(),
                                        special.at("tokens").get<std::vector<std::string>>()};
    }
    return processor;
  }
  fail(fmt::format("post_processor type \"{}\" is not supported (BertProcessing, TemplateProcessing, ByteLevel or null)", type));
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
    case PostProcessor::Kind::kBert: {
      // [CLS] and [SEP] are the first and last pieces of the single-text template.
      const std::string& cls = processor.single.front().special_token;
      const std::string& sep = processor.single.back().special_token;
      out["type"] = "BertProcessing";
      out["sep"] = ordered_json::array({sep, processor.special_tokens.at(sep).ids.at(0)});
      out["cls"] = ordered_json::array({cls, processor.special_tokens.at(cls).ids.at(0)});
      return out;
    }
    case PostProcessor::Kind::kTemplate: {
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
    return ByteLevelDecoder{};
  }
  std::string type = type_of(node, "decoder");
  if (type == "WordPiece") return WordPieceDecoder{value_or<std::string>(node, "prefix", "##"), value_or<bool>(node, "cleanup", true)};
  if (type == "ByteLevel") return ByteLevelDecoder{};
  fail(fmt::format("decoder type \"{}\" is not supported (WordPiece or ByteLevel)", type));
}

ordered_json write_decoder(const Decoder& decoder) {
  ordered_json out;
  if (const auto* wordpiece = std::get_if<WordPieceDecoder>(&decoder)) {
    out["type"] = "WordPiece";
    out["prefix"] = wordpiece->prefix;
    out["cleanup"] = wordpiece->cleanup;
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
    token.id = item.at("id").get<uint32_t>();
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
  options.max_length = node.at("max_length").get<size_t>();
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
    options.length = strategy.at("Fixed").get<size_t>();
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
  try {
    if (!root.is_object()) fail("the top level is not a JSON object");
    TokenizerParts parts;
    parts.model = read_model(member_or_null(root, "model"));
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
