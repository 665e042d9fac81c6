#include "attnkit/text/pretrained.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "attnkit/error.h"
#include "attnkit/text/bpe.h"
#include "attnkit/text/marian_tokenizer.h"
#include "attnkit/text/sentencepiece_model.h"
#include "attnkit/text/unigram.h"
#include "attnkit/text/tokenizer_json.h"
#include "attnkit/text/vocab_files.h"
#include "attnkit/text/wordpiece.h"

namespace attnkit::text {
namespace {

namespace fs = std::filesystem;

constexpr const char* kEndOfText = "<|endoftext|>";

Tokenizer load_bpe(const fs::path& vocab, const fs::path& merges) {
  if (!fs::exists(merges)) {
    throw Error(fmt::format("{}: the merges file {} is missing next to it", vocab.string(), merges.filename().string()));
  }
  Vocabulary vocabulary = read_vocab_json(vocab.string());
  std::vector<Merge> merge_list = read_merges_txt(merges.string(), vocabulary);
  try {
    if (vocabulary.find("<s>") && vocabulary.find("</s>")) return make_roberta_tokenizer(vocabulary, std::move(merge_list));
    return make_gpt2_tokenizer(vocabulary, std::move(merge_list));
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", vocab.string(), e.what()));
  }
}

Tokenizer load_vocab_txt(const fs::path& path, const LoadOptions& options) {
  Vocabulary vocabulary = read_vocab_txt(path.string());
  try {
    return make_bert_tokenizer(vocabulary, options.bert);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", path.string(), e.what()));
  }
}

}  // namespace

Tokenizer make_bert_tokenizer(const Vocabulary& vocabulary, const BertTokenizerOptions& options) {
  TokenizerParts parts;
  WordPieceOptions wordpiece;
  wordpiece.unk_token = options.unk_token;
  parts.model = std::make_shared<WordPiece>(vocabulary, wordpiece);
  parts.normalizer = BertNormalizer{true, true, std::nullopt, options.lowercase};
  parts.pre_tokenizer = BertPreTokenizer{};
  parts.decoder = WordPieceDecoder{};
  std::vector<AddedToken> added;
  for (const std::string* special : {&options.pad_token, &options.unk_token, &options.cls_token, &options.sep_token, &options.mask_token}) {
    if (auto id = vocabulary.find(*special)) added.push_back({*special, *id, true, false, false, false, false});
  }
  std::sort(added.begin(), added.end(), [](const AddedToken& a, const AddedToken& b) { return a.id < b.id; });
  parts.added_tokens = AddedVocabulary(std::move(added));
  auto cls = vocabulary.find(options.cls_token);
  auto sep = vocabulary.find(options.sep_token);
  if (cls && sep) parts.post_processor = PostProcessor::bert(options.cls_token, *cls, options.sep_token, *sep);
  return Tokenizer(std::move(parts));
}

Tokenizer make_gpt2_tokenizer(const Vocabulary& vocabulary, std::vector<Merge> merges) {
  TokenizerParts parts;
  parts.model = std::make_shared<ByteLevelBpe>(vocabulary, std::move(merges));
  parts.pre_tokenizer = ByteLevelPreTokenizer{false, true, true};
  parts.post_processor = PostProcessor::byte_level(false, true);
  parts.decoder = ByteLevelDecoder{};
  if (auto id = vocabulary.find(kEndOfText)) {
    parts.added_tokens = AddedVocabulary({{kEndOfText, *id, true, false, false, false, true}});
  }
  return Tokenizer(std::move(parts));
}

Tokenizer make_roberta_tokenizer(const Vocabulary& vocabulary, std::vector<Merge> merges) {
  TokenizerParts parts;
  parts.model = std::make_shared<ByteLevelBpe>(vocabulary, std::move(merges));
  parts.pre_tokenizer = ByteLevelPreTokenizer{false, true, true};
  parts.decoder = ByteLevelDecoder{};
  std::vector<AddedToken> added;
  for (const char* special : {"<s>", "<pad>", "</s>", "<unk>", "<mask>"}) {
    // <mask> swallows the space before it, so "a <mask>" reads as "a" + "<mask>".
    const bool mask = std::string(special) == "<mask>";
    if (auto id = vocabulary.find(special)) added.push_back({special, *id, true, false, mask, false, !mask});
  }
  std::sort(added.begin(), added.end(), [](const AddedToken& a, const AddedToken& b) { return a.id < b.id; });
  parts.added_tokens = AddedVocabulary(std::move(added));
  const auto cls = vocabulary.find("<s>");
  const auto sep = vocabulary.find("</s>");
  if (!cls || !sep) throw Error("a RoBERTa vocabulary needs <s> and </s>");
  parts.post_processor = PostProcessor::roberta("<s>", *cls, "</s>", *sep, true, false);
  return Tokenizer(std::move(parts));
}

Tokenizer load_tokenizer(const std::string& path_text, const LoadOptions& options) {
  const fs::path path(path_text);
  std::error_code error;
  if (fs::is_directory(path, error)) {
    if (fs::exists(path / "tokenizer.json")) return read_tokenizer_json((path / "tokenizer.json").string());
    if (fs::exists(path / "vocab.json")) return load_bpe(path / "vocab.json", path / "merges.txt");
    if (fs::exists(path / "encoder.json")) return load_bpe(path / "encoder.json", path / "vocab.bpe");
    if (fs::exists(path / "vocab.txt")) return load_vocab_txt(path / "vocab.txt", options);
    for (const char* name : {"spiece.model", "sentencepiece.bpe.model", "tokenizer.model"}) {
      if (fs::exists(path / name)) return read_sentencepiece_model((path / name).string());
    }
    throw Error(fmt::format("{}: no tokenizer.json, vocab.json + merges.txt, encoder.json + vocab.bpe, vocab.txt or spiece.model in this directory",
                            path_text));
  }
  if (!fs::exists(path, error)) throw Error(fmt::format("{}: no such file or directory", path_text));
  const std::string name = path.filename().string();
  const std::string extension = path.extension().string();
  if (name == "encoder.json") return load_bpe(path, path.parent_path() / "vocab.bpe");
  if (name == "vocab.json") return load_bpe(path, path.parent_path() / "merges.txt");
  if (extension == ".json") return read_tokenizer_json(path.string());
  if (extension == ".txt") return load_vocab_txt(path, options);
  if (extension == ".model") return read_sentencepiece_model(path.string());
  throw Error(fmt::format("{}: unknown tokenizer file; expected tokenizer.json, vocab.txt, vocab.json, encoder.json or a SentencePiece .model",
                          path_text));
}

std::optional<Tokenizer> find_tokenizer(const std::string& directory, const LoadOptions& options) {
  std::error_code error;
  if (!fs::is_directory(directory, error)) return std::nullopt;
  for (const char* name : {"tokenizer.json", "vocab.json", "encoder.json", "vocab.txt"})
    if (fs::exists(fs::path(directory) / name, error)) return load_tokenizer(directory, options);
  return std::nullopt;
}

std::unique_ptr<TextTokenizer> load_text_tokenizer(const std::string& path, const LoadOptions& options) {
  if (fs::is_directory(path) && MarianTokenizer::found_in(path)) return std::make_unique<MarianTokenizer>(path);
  return std::make_unique<Tokenizer>(load_tokenizer(path, options));
}

std::unique_ptr<TextTokenizer> find_text_tokenizer(const std::string& directory, const LoadOptions& options) {
  if (fs::is_directory(directory) && MarianTokenizer::found_in(directory))
    return std::make_unique<MarianTokenizer>(directory);
  if (auto found = find_tokenizer(directory, options)) return std::make_unique<Tokenizer>(std::move(*found));
  return nullptr;
}

std::unique_ptr<TextTokenizer> tokenizer_for_model(const std::string& given_path, const std::string& model_directory) {
  return given_path.empty() ? find_text_tokenizer(model_directory) : load_text_tokenizer(given_path);
}

void save_tokenizer(const Tokenizer& tokenizer, const std::string& directory) {
  const fs::path dir(directory);
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) throw Error(fmt::format("{}: cannot create directory ({})", directory, error.message()));
  write_tokenizer_json(tokenizer, (dir / "tokenizer.json").string());
  const Model& model = *tokenizer.parts().model;
  if (const auto* bpe = dynamic_cast<const ByteLevelBpe*>(&model)) {
    write_vocab_json(bpe->vocabulary(), (dir / "vocab.json").string());
    write_merges_txt(bpe->merges(), (dir / "merges.txt").string());
  } else if (dynamic_cast<const Unigram*>(&model) == nullptr && dynamic_cast<const Bpe*>(&model) == nullptr) {
    // WordPiece; Unigram and SentencePiece-style BPE have only tokenizer.json
    write_vocab_txt(model.vocabulary(), (dir / "vocab.txt").string());
  }
}

}  // namespace attnkit::text
