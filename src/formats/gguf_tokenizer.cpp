// A GGUF file's tokenizer as Hugging Face files (include/attnkit/formats/gguf_tokenizer.h): the
// pipeline transformers 5.x builds from the same metadata (its integrations/gguf), written as a
// tokenizer.json that the text layer loads.
#include "attnkit/formats/gguf_tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "attnkit/error.h"
#include "attnkit/text/byte_level.h"
#include "attnkit/text/tokenizer_json.h"
#include "attnkit/text/unicode.h"

namespace attnkit::formats {
namespace {

using json = nlohmann::json;

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
constexpr int64_t kControlToken = 3;
constexpr int64_t kUserDefinedToken = 4;

// More tokens than ids a tokenizer.json can hold is an error, not an allocation.
constexpr size_t kMaxTokens = size_t{1} << 31;

const std::string kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// The pipeline transformers picks: GPT2Tokenizer (byte-level BPE), LlamaTokenizer
// (SentencePiece-style BPE), its Gemma variant (GemmaTokenizer, Gemma's space tokens and merge
// order), its Phi-3 variant (the prefix space from the normaliser), or GemmaTokenizer as is.
enum class Pipeline { kByteLevel, kSentencePiece, kGemma, kPhi3, kGemma4 };

// The split rules of tokenizer.ggml.pre values that are not GPT-2's (the Split pre-tokenizer's
// regular expressions of the models' own tokenizer.json files, as transformers applies them).
constexpr std::string_view kLlama3Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen35Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kTekkenSplit =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kGpt4oSplit =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct PreTokenizerKind {
  std::string_view name;
  std::string_view split;  // empty: GPT-2's rule (the ByteLevel pre-tokenizer's own regex)
};

// tokenizer.ggml.pre values read for tokenizer.ggml.model "gpt2". "smollm": llama.cpp and
// SmolLM2's tokenizer.json also split digits one by one; transformers does not (docs/tokenizers.md).
constexpr PreTokenizerKind kPreTokenizers[] = {
    {"default", {}}, {"gpt2", {}}, {"smollm", {}},
    {"llama3", kLlama3Split}, {"llama-v3", kLlama3Split}, {"llama-bpe", kLlama3Split}, {"falcon3", kLlama3Split},
    {"falcon-h1", kLlama3Split}, {"pixtral", kLlama3Split}, {"midm-2.0", kLlama3Split}, {"lfm2", kLlama3Split},
    {"jina-v5-nano", kLlama3Split}, {"dbrx", kLlama3Split}, {"smaug-bpe", kLlama3Split},
    {"qwen2", kQwen2Split}, {"deepseek-r1-qwen", kQwen2Split}, {"kormo", kQwen2Split}, {"f2llmv2", kQwen2Split},
    {"megrez", kQwen2Split},
    {"qwen35", kQwen35Split},
    {"tekken", kTekkenSplit},
    {"gpt-4o", kGpt4oSplit}, {"llama4", kGpt4oSplit}, {"kanana2", kGpt4oSplit}, {"talkie", kGpt4oSplit},
    {"minimax-m2", kGpt4oSplit},
};

// The metadata, read and checked.
struct TokenizerMetadata {
  std::string model;         // tokenizer.ggml.model
  std::string pre;           // tokenizer.ggml.pre ("" when absent)
  std::string architecture;  // general.architecture ("" when absent)
  std::vector<std::string> tokens;
  std::optional<std::vector<float>> scores;
  std::vector<int64_t> types;  // empty when the file has none
  std::optional<std::vector<std::string_view>> merges;
  std::optional<size_t> bos, eos, unk, pad;  // indices into tokens
  bool add_bos = false;
  bool add_eos = false;
  std::optional<std::string_view> chat_template;
};

[[noreturn]] void fail(const GgufFile& file, const std::string& message) {
  throw Error(fmt::format("{}: {}", file.path(), message));
}

std::optional<size_t> token_index(const GgufFile& file, const char* key, size_t count) {
  if (file.find(key) == nullptr) return std::nullopt;
  const int64_t id = file.get_integer(key);
  if (id < 0 || static_cast<uint64_t>(id) >= count)
    fail(file, fmt::format("metadata key '{}' is {}, not the id of one of the {} tokens", key, id, count));
  return static_cast<size_t>(id);
}

TokenizerMetadata read_metadata(const GgufFile& file) {
  TokenizerMetadata m;
  m.model = std::string(file.get_string("tokenizer.ggml.model"));
  if (file.find("tokenizer.ggml.pre") != nullptr) m.pre = std::string(file.get_string("tokenizer.ggml.pre"));
  if (file.find("general.architecture") != nullptr)
    m.architecture = std::string(file.get_string("general.architecture"));
  const std::vector<std::string_view> tokens = file.get_strings("tokenizer.ggml.tokens");
  if (tokens.empty()) fail(file, "metadata key 'tokenizer.ggml.tokens' is an empty array");
  if (tokens.size() > kMaxTokens)
    fail(file, fmt::format("metadata key 'tokenizer.ggml.tokens' holds {} tokens, more than {}", tokens.size(), kMaxTokens));
  m.tokens.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (text::unicode::find_invalid_utf8(tokens[i]) != std::string_view::npos)
      fail(file, fmt::format("tokenizer.ggml.tokens[{}] ('{}') is not valid UTF-8", i, one_line(tokens[i])));
    m.tokens.emplace_back(tokens[i]);
  }
  const size_t count = m.tokens.size();
  auto check_count = [&](const char* key, size_t size) {
    if (size != count)
      fail(file, fmt::format("metadata key '{}' has {} values for the {} tokens of 'tokenizer.ggml.tokens'", key, size, count));
  };
  if (file.find("tokenizer.ggml.scores") != nullptr) {
    m.scores = file.get_float32s("tokenizer.ggml.scores");
    check_count("tokenizer.ggml.scores", m.scores->size());
    for (size_t i = 0; i < count; ++i) {
      if (std::isnan((*m.scores)[i])) fail(file, fmt::format("tokenizer.ggml.scores[{}] is NaN", i));
    }
  }
  if (file.find("tokenizer.ggml.token_type") != nullptr) {
    m.types = file.get_integers("tokenizer.ggml.token_type");
    check_count("tokenizer.ggml.token_type", m.types.size());
  }
  if (file.find("tokenizer.ggml.merges") != nullptr) m.merges = file.get_strings("tokenizer.ggml.merges");
  m.bos = token_index(file, "tokenizer.ggml.bos_token_id", count);
  m.eos = token_index(file, "tokenizer.ggml.eos_token_id", count);
  m.unk = token_index(file, "tokenizer.ggml.unknown_token_id", count);
  m.pad = token_index(file, "tokenizer.ggml.padding_token_id", count);
  if (file.find("tokenizer.ggml.add_bos_token") != nullptr) {
    m.add_bos = file.get_bool("tokenizer.ggml.add_bos_token");
  } else {
    // llama.cpp adds BOS to a SentencePiece vocabulary that does not say otherwise (older files).
    m.add_bos = m.model == "llama";
  }
  if (m.model == "gemma4") m.add_bos = false;  // its chat template writes <bos> itself (transformers)
  if (file.find("tokenizer.ggml.add_eos_token") != nullptr) m.add_eos = file.get_bool("tokenizer.ggml.add_eos_token");
  if (file.find("tokenizer.chat_template") != nullptr) {
    m.chat_template = file.get_string("tokenizer.chat_template");
    if (text::unicode::find_invalid_utf8(*m.chat_template) != std::string_view::npos)
      fail(file, "metadata key 'tokenizer.chat_template' is not valid UTF-8");
  }
  return m;
}

Pipeline pipeline_of(const GgufFile& file, const TokenizerMetadata& m) {
  if (m.model == "gpt2") return Pipeline::kByteLevel;
  if (m.model == "gemma4") return Pipeline::kGemma4;
  if (m.model == "llama") {
    if (m.architecture == "gemma" || m.architecture == "gemma2" || m.architecture == "gemma3") return Pipeline::kGemma;
    if (m.architecture == "phi3") return Pipeline::kPhi3;
    return Pipeline::kSentencePiece;
  }
  fail(file, fmt::format("metadata key 'tokenizer.ggml.model' is '{}': attnkit reads 'gpt2', 'llama' and 'gemma4'",
                         one_line(m.model)));
}

// The regular expression of the Split step before ByteLevel; empty for GPT-2's own rule.
std::string_view split_rule(const GgufFile& file, const TokenizerMetadata& m, Pipeline pipeline) {
  if (pipeline != Pipeline::kByteLevel) {
    if (!m.pre.empty() && m.pre != "default")
      fail(file, fmt::format("metadata key 'tokenizer.ggml.pre' is '{}': tokenizer.ggml.model '{}' is read with "
                             "'default' only", one_line(m.pre), m.model));
    return {};
  }
  if (m.pre.empty()) return {};
  for (const PreTokenizerKind& kind : kPreTokenizers) {
    if (kind.name == m.pre) return kind.split;
  }
  std::string known;
  for (const PreTokenizerKind& kind : kPreTokenizers) known += (known.empty() ? "" : ", ") + std::string(kind.name);
  fail(file, fmt::format("metadata key 'tokenizer.ggml.pre' is '{}', which attnkit does not know (it reads {})",
                         one_line(m.pre), known));
}

// Python's str.isspace for one character (what str.strip() removes).
bool python_space(char32_t c) { return text::unicode::is_whitespace(c) || (c >= 0x1C && c <= 0x1F); }

// Gemma's files spell a token of spaces (and other white space) with real spaces; its tokenizer
// looks them up as U+2581, one per character.
std::string gemma_spelling(const std::string& token) {
  if (token.find(' ') == std::string::npos) return token;
  const std::u32string chars = text::unicode::decode_utf8(token, text::unicode::InvalidUtf8::kReplace);
  if (!std::all_of(chars.begin(), chars.end(), python_space)) return token;
  std::string spelled;
  for (size_t i = 0; i < chars.size(); ++i) spelled += kSpace;
  return spelled;
}

// The vocabulary's tokens as the model spells them: byte-level vocabularies write every byte as
// GPT-2's printable character (a token with another character is spelled from its UTF-8 bytes).
std::vector<std::string> model_spelling(const TokenizerMetadata& m, Pipeline pipeline) {
  std::vector<std::string> spelled;
  spelled.reserve(m.tokens.size());
  for (const std::string& token : m.tokens) {
    if (pipeline == Pipeline::kByteLevel) {
      spelled.push_back(text::byte_level::token_to_bytes(token) ? token : text::byte_level::bytes_to_token(token));
    } else if (pipeline == Pipeline::kGemma) {
      spelled.push_back(gemma_spelling(token));
    } else {
      spelled.push_back(token);
    }
  }
  return spelled;
}

// token -> id; a token written twice keeps its last id (a Python dict built in file order).
using VocabularyIndex = std::unordered_map<std::string_view, uint32_t>;

VocabularyIndex index_of(const std::vector<std::string>& tokens) {
  VocabularyIndex index;
  index.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) index[tokens[i]] = static_cast<uint32_t>(i);
  return index;
}

using MergePair = std::pair<std::string, std::string>;

// The file's merges, "left right" each; both parts and their concatenation must be tokens.
std::vector<MergePair> file_merges(const GgufFile& file, const std::vector<std::string_view>& merges,
                                   const VocabularyIndex& index) {
  std::vector<MergePair> pairs;
  pairs.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string_view merge = merges[i];
    const size_t space = merge.find(' ');
    if (space == std::string_view::npos || merge.find(' ', space + 1) != std::string_view::npos)
      fail(file, fmt::format("tokenizer.ggml.merges[{}] ('{}') is not two tokens separated by one space", i,
                             one_line(merge)));
    MergePair pair(merge.substr(0, space), merge.substr(space + 1));
    for (const std::string& part : {pair.first, pair.second, pair.first + pair.second}) {
      if (index.count(part) == 0)
        fail(file, fmt::format("tokenizer.ggml.merges[{}] ('{}'): '{}' is not a token of the vocabulary", i,
                               one_line(merge), one_line(part)));
    }
    pairs.push_back(std::move(pair));
  }
  return pairs;
}

// The merges a vocabulary implies when the file lists none (transformers' generate_merges): every
// split of every token into two tokens of the vocabulary, best score first; ties by the lengths of
// the two parts (longer first), then in vocabulary order.
std::vector<MergePair> derived_merges(const std::vector<std::string>& tokens, const VocabularyIndex& index,
                                      const std::vector<double>& scores) {
  struct Candidate {
    double score;
    size_t left_length;
    size_t right_length;
    uint32_t left_id;
    uint32_t right_id;
    std::string_view token;
    size_t split;  // bytes in the left part
  };
  // Each distinct token once, where it first occurs, with the score of its last occurrence.
  std::unordered_map<std::string_view, size_t> last;
  last.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) last[tokens[i]] = i;
  // The byte lengths tokens have: a split is looked up only when both parts have one of them, so a
  // file with one huge token costs its length, not its length squared.
  size_t longest = 0;
  for (const std::string& token : tokens) longest = std::max(longest, token.size());
  std::vector<bool> has_length(longest + 1, false);
  for (const std::string& token : tokens) has_length[token.size()] = true;
  const auto continuation = [](char byte) { return (static_cast<unsigned char>(byte) & 0xC0) == 0x80; };
  std::vector<Candidate> candidates;
  std::vector<Candidate> local;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string_view token = tokens[i];
    const auto found = last.find(token);
    if (found == last.end()) continue;  // a repeat: already taken
    const double score = scores[found->second];
    last.erase(found);
    const auto characters = static_cast<size_t>(std::count_if(token.begin(), token.end(), [&](char b) { return !continuation(b); }));
    local.clear();
    size_t before = 0;  // characters before byte `split`
    for (size_t split = 0; split < token.size(); ++split) {
      if (continuation(token[split])) continue;
      if (split > 0 && has_length[split] && has_length[token.size() - split]) {
        const auto left = index.find(token.substr(0, split));
        const auto right = left == index.end() ? index.end() : index.find(token.substr(split));
        if (right != index.end())
          local.push_back({score, before, characters - before, left->second, right->second, token, split});
      }
      ++before;
    }
    std::stable_sort(local.begin(), local.end(), [](const Candidate& a, const Candidate& b) {
      return std::make_pair(a.left_id, a.right_id) < std::make_pair(b.left_id, b.right_id);
    });
    candidates.insert(candidates.end(), local.begin(), local.end());
  }
  std::stable_sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return std::tie(a.score, a.left_length, a.right_length) > std::tie(b.score, b.left_length, b.right_length);
  });
  std::vector<MergePair> merges;
  merges.reserve(candidates.size());
  for (const Candidate& c : candidates)
    merges.emplace_back(std::string(c.token.substr(0, c.split)), std::string(c.token.substr(c.split)));
  return merges;
}

std::vector<MergePair> merges_of(const GgufFile& file, const TokenizerMetadata& m, Pipeline pipeline,
                                 const std::vector<std::string>& tokens, const VocabularyIndex& index) {
  if (m.merges) return file_merges(file, *m.merges, index);
  std::vector<double> scores(tokens.size());
  if (pipeline == Pipeline::kGemma) {
    // Gemma's scores do not follow its merge order; the order of the tokens in the file does.
    for (size_t i = 0; i < tokens.size(); ++i) scores[i] = -static_cast<double>(i);
  } else if (m.scores) {
    for (size_t i = 0; i < tokens.size(); ++i) scores[i] = (*m.scores)[i];
  } else {
    fail(file, "the file has neither 'tokenizer.ggml.merges' nor 'tokenizer.ggml.scores' to derive merges from");
  }
  return derived_merges(tokens, index, scores);
}

// The added tokens, as transformers' AddedVocabulary assigns them: a token of the vocabulary keeps
// its id, another one gets the next id after the vocabulary and the tokens added before it.
class AddedTokens {
 public:
  AddedTokens(const VocabularyIndex& vocabulary, uint32_t id_bound) : vocabulary_(vocabulary), next_id_(id_bound) {}

  // Adds `content`, or sets the flags of a token already added.
  void add(const std::string& content, bool special) {
    const auto found = positions_.find(content);
    if (found != positions_.end()) {
      tokens_[found->second].special = special;
      return;
    }
    const auto in_vocabulary = vocabulary_.find(content);
    const uint32_t id = in_vocabulary != vocabulary_.end() ? in_vocabulary->second : next_id_++;
    positions_.emplace(content, tokens_.size());
    tokens_.push_back({content, id, special});
  }
  // Adds `content` when it is not added yet (the named special tokens: flags of a token already
  // added stay).
  void add_missing(const std::string& content) {
    if (positions_.count(content) == 0) add(content, true);
  }
  bool in_vocabulary(const std::string& content) const { return vocabulary_.count(content) > 0; }
  std::optional<uint32_t> id(const std::string& content) const {
    const auto found = positions_.find(content);
    if (found != positions_.end()) return tokens_[found->second].id;
    const auto in_vocabulary = vocabulary_.find(content);
    if (in_vocabulary != vocabulary_.end()) return in_vocabulary->second;
    return std::nullopt;
  }

  json to_json() const {
    std::vector<const Token*> sorted;
    for (const Token& token : tokens_) sorted.push_back(&token);
    std::stable_sort(sorted.begin(), sorted.end(), [](const Token* a, const Token* b) { return a->id < b->id; });
    json list = json::array();
    for (const Token* token : sorted) {
      list.push_back({{"id", token->id}, {"content", token->content}, {"single_word", false}, {"lstrip", false},
                      {"rstrip", false}, {"normalized", false}, {"special", token->special}});
    }
    return list;
  }

 private:
  struct Token {
    std::string content;
    uint32_t id;
    bool special;
  };
  const VocabularyIndex& vocabulary_;
  uint32_t next_id_;
  std::vector<Token> tokens_;
  std::unordered_map<std::string, size_t> positions_;
};

std::optional<std::string> named_token(const TokenizerMetadata& m, const std::optional<size_t>& index) {
  if (!index) return std::nullopt;
  return m.tokens[*index];
}

json string_pattern(const std::string& text) { return {{"String", text}}; }

json byte_level_step(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

json pre_tokenizer_json(Pipeline pipeline, std::string_view split) {
  switch (pipeline) {
    case Pipeline::kByteLevel:
      if (split.empty()) return byte_level_step(true);
      return {{"type", "Sequence"},
              {"pretokenizers",
               json::array({{{"type", "Split"}, {"pattern", {{"Regex", std::string(split)}}}, {"behavior", "Isolated"},
                             {"invert", false}},
                            byte_level_step(false)})}};
    case Pipeline::kSentencePiece:
      return {{"type", "Metaspace"}, {"replacement", kSpace}, {"prepend_scheme", "first"}, {"split", false}};
    case Pipeline::kPhi3:
      return nullptr;
    case Pipeline::kGemma:
    case Pipeline::kGemma4:
      return {{"type", "Split"}, {"pattern", string_pattern(" ")}, {"behavior", "MergedWithPrevious"}, {"invert", false}};
  }
  return nullptr;
}

json normalizer_json(Pipeline pipeline) {
  const json replace_spaces = {{"type", "Replace"}, {"pattern", string_pattern(" ")}, {"content", kSpace}};
  switch (pipeline) {
    case Pipeline::kPhi3:
      return {{"type", "Sequence"}, {"normalizers", json::array({{{"type", "Prepend"}, {"prepend", kSpace}}, replace_spaces})}};
    case Pipeline::kGemma:
    case Pipeline::kGemma4:
      return replace_spaces;
    default:
      return nullptr;
  }
}

json decoder_json(Pipeline pipeline) {
  if (pipeline == Pipeline::kByteLevel)
    return {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  json steps = json::array({{{"type", "Replace"}, {"pattern", string_pattern(kSpace)}, {"content", " "}},
                            {{"type", "ByteFallback"}},
                            {{"type", "Fuse"}}});
  // LlamaTokenizer's Metaspace (or Phi-3's Prepend) adds one space in front: the decoder strips it.
  if (pipeline == Pipeline::kSentencePiece || pipeline == Pipeline::kPhi3)
    steps.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1u}, {"stop", 0u}});
  return {{"type", "Sequence"}, {"decoders", std::move(steps)}};
}

json model_json(Pipeline pipeline, const VocabularyIndex& index, const std::vector<MergePair>& merges) {
  json vocab = json::object();
  for (const auto& [token, id] : index) vocab[std::string(token)] = id;
  json merge_list = json::array();
  merge_list.get_ref<json::array_t&>().reserve(merges.size());
  for (const auto& [left, right] : merges) merge_list.push_back(json::array({left, right}));
  const bool byte_level = pipeline == Pipeline::kByteLevel;
  const bool gemma = pipeline == Pipeline::kGemma || pipeline == Pipeline::kGemma4;
  json model = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", gemma ? json("<unk>") : json(nullptr)},
                {"continuing_subword_prefix", byte_level ? json("") : json(nullptr)},
                {"end_of_word_suffix", byte_level ? json("") : json(nullptr)},
                {"fuse_unk", !byte_level},
                {"byte_fallback", !byte_level},
                {"ignore_merges", false}};
  model["vocab"] = std::move(vocab);
  model["merges"] = std::move(merge_list);
  return model;
}

// The tokens the pipeline's transformers class adds as special tokens of its own (GPT2Tokenizer's
// "<|endoftext|>", LlamaTokenizer's "<unk>", "<s>", "</s>", GemmaTokenizer's five), when the
// vocabulary has them. transformers adds them with new ids when it does not; attnkit does not.
std::vector<std::string> class_special_tokens(Pipeline pipeline) {
  switch (pipeline) {
    case Pipeline::kByteLevel: return {"<|endoftext|>"};
    case Pipeline::kSentencePiece:
    case Pipeline::kPhi3: return {"<unk>", "<s>", "</s>"};
    case Pipeline::kGemma:
    case Pipeline::kGemma4: return {"<bos>", "<eos>", "<unk>", "<pad>", "<mask>"};
  }
  return {};
}

json template_piece(const std::string& token, bool sequence, unsigned type_id) {
  if (sequence) return {{"Sequence", {{"id", token}, {"type_id", type_id}}}};
  return {{"SpecialToken", {{"id", token}, {"type_id", type_id}}}};
}

json post_processor_json(const TokenizerMetadata& m, const AddedTokens& added) {
  const std::optional<std::string> bos = named_token(m, m.bos);
  const std::optional<std::string> eos = named_token(m, m.eos);
  const bool add_bos = m.add_bos && bos.has_value();
  const bool add_eos = m.add_eos && eos.has_value();
  // [bos] A [eos], and for pairs the same followed by [bos] B [eos] with type id 1.
  auto append = [&](json& pieces, const char* sequence, unsigned type_id) {
    if (add_bos) pieces.push_back(template_piece(*bos, false, type_id));
    pieces.push_back(template_piece(sequence, true, type_id));
    if (add_eos) pieces.push_back(template_piece(*eos, false, type_id));
  };
  json single = json::array();
  append(single, "A", 0u);
  json pair = single;
  append(pair, "B", 1u);
  json special_tokens = json::object();
  for (const auto& [wanted, token] : {std::make_pair(add_bos, bos), std::make_pair(add_eos, eos)}) {
    if (!wanted) continue;
    special_tokens[*token] = {{"id", *token}, {"ids", json::array({*added.id(*token)})}, {"tokens", json::array({*token})}};
  }
  return {{"type", "TemplateProcessing"}, {"single", std::move(single)}, {"pair", std::move(pair)},
          {"special_tokens", std::move(special_tokens)}};
}

}  // namespace

nlohmann::json gguf_tokenizer_json(const GgufFile& file) {
  const TokenizerMetadata m = read_metadata(file);
  const Pipeline pipeline = pipeline_of(file, m);
  const std::string_view split = split_rule(file, m, pipeline);
  const std::vector<std::string> tokens = model_spelling(m, pipeline);
  const VocabularyIndex index = index_of(tokens);
  const std::vector<MergePair> merges = merges_of(file, m, pipeline, tokens, index);

  AddedTokens added(index, static_cast<uint32_t>(tokens.size()));
  for (const std::string& token : class_special_tokens(pipeline)) {
    if (added.in_vocabulary(token)) added.add(token, true);
  }
  for (size_t i = 0; i < m.types.size(); ++i) {
    // A byte-level vocabulary writes every real token in the byte alphabet: a control token with
    // another character is a converter's mislabel, which transformers leaves out.
    if (m.types[i] == kControlToken &&
        (pipeline != Pipeline::kByteLevel || text::byte_level::token_to_bytes(m.tokens[i]).has_value()))
      added.add(m.tokens[i], true);
  }
  for (size_t i = 0; i < m.types.size(); ++i) {
    if (m.types[i] == kUserDefinedToken && added.in_vocabulary(m.tokens[i])) added.add(m.tokens[i], false);
  }
  for (const std::optional<size_t>& named : {m.bos, m.eos, m.unk, m.pad}) {
    if (named) added.add_missing(m.tokens[*named]);
  }

  json root = json::object();
  root["version"] = "1.0";
  root["truncation"] = nullptr;
  root["padding"] = nullptr;
  root["added_tokens"] = added.to_json();
  root["normalizer"] = normalizer_json(pipeline);
  root["pre_tokenizer"] = pre_tokenizer_json(pipeline, split);
  root["post_processor"] = post_processor_json(m, added);
  root["decoder"] = decoder_json(pipeline);
  root["model"] = model_json(pipeline, index, merges);
  return root;
}

nlohmann::json gguf_tokenizer_config_json(const GgufFile& file) {
  const TokenizerMetadata m = read_metadata(file);
  (void)pipeline_of(file, m);
  json config = json::object();
  config["add_bos_token"] = m.add_bos;
  config["add_eos_token"] = m.add_eos;
  const std::pair<const char*, std::optional<size_t>> named[] = {
      {"bos_token", m.bos}, {"eos_token", m.eos}, {"unk_token", m.unk}, {"pad_token", m.pad}};
  for (const auto& [key, index] : named) config[key] = index ? json(m.tokens[*index]) : json(nullptr);
  if (m.chat_template) config["chat_template"] = std::string(*m.chat_template);
  return config;
}

text::Tokenizer gguf_tokenizer(const GgufFile& file) {
  return text::tokenizer_from_json(gguf_tokenizer_json(file), file.path());
}

text::Tokenizer read_gguf_tokenizer(const std::string& path) { return gguf_tokenizer(GgufFile::open(path)); }

}  // namespace attnkit::formats
