#include "attnkit/text/marian_tokenizer.h"

#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/strings.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <cstdlib>
#include <mutex>

namespace attnkit::text {
namespace {

namespace fs = std::filesystem;
constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // '▁'

// libattnkit_sentencepiece.so (src/sentencepiece_shim/), loaded once, privately.
struct SentencePieceModule {
  void* (*load)(const std::string&, std::string*) = nullptr;
  void (*free)(void*) = nullptr;
  bool (*encode)(void*, const std::string&, std::vector<std::string>*, std::string*) = nullptr;
  bool (*decode)(void*, const std::vector<std::string>&, std::string*, std::string*) = nullptr;
};

const SentencePieceModule& sentencepiece_module() {
  static SentencePieceModule module;
  static std::string failure;
  static std::once_flag once;
  std::call_once(once, [] {
    const char* name = "libattnkit_sentencepiece.so";
    std::vector<std::string> places;
    if (const char* given = std::getenv("ATTNKIT_SENTENCEPIECE_MODULE")) places.emplace_back(given);
    Dl_info info;
    if (dladdr(reinterpret_cast<void*>(&sentencepiece_module), &info) && info.dli_fname) {
      const fs::path here = fs::path(info.dli_fname).parent_path();
      places.push_back((here / name).string());
      places.push_back((here.parent_path() / name).string());
    }
#ifdef ATTNKIT_BUILD_DIR
    places.push_back((fs::path(ATTNKIT_BUILD_DIR) / name).string());
#endif
    places.emplace_back(name);
    void* handle = nullptr;
    for (const auto& place : places) {
      std::error_code ec;
      if (place != name && !fs::exists(place, ec)) continue;
      handle = dlopen(place.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (handle) break;
      failure = dlerror();
    }
    if (!handle) {
      if (failure.empty()) failure = fmt::format("{} not found", name);
      return;
    }
    module.load = reinterpret_cast<decltype(module.load)>(dlsym(handle, "attnkit_sentencepiece_load"));
    module.free = reinterpret_cast<decltype(module.free)>(dlsym(handle, "attnkit_sentencepiece_free"));
    module.encode = reinterpret_cast<decltype(module.encode)>(dlsym(handle, "attnkit_sentencepiece_encode"));
    module.decode = reinterpret_cast<decltype(module.decode)>(dlsym(handle, "attnkit_sentencepiece_decode"));
    if (!module.load || !module.free || !module.encode || !module.decode) {
      failure = fmt::format("{} lacks its functions", name);
      module = {};
    }
  });
  if (!module.load)
    throw Error(fmt::format("Marian tokenizer: cannot load SentencePiece ({})", one_line(failure)));
  return module;
}

}  // namespace

struct MarianTokenizer::Processor {
  void* handle = nullptr;
  explicit Processor(const fs::path& path) {
    if (!fs::exists(path)) throw Error(fmt::format("{}: no such file (Marian tokenizer)", path.string()));
    std::string error;
    handle = sentencepiece_module().load(path.string(), &error);
    if (!handle) throw Error(fmt::format("{}: not a SentencePiece model ({})", path.string(), one_line(error)));
  }
  ~Processor() { sentencepiece_module().free(handle); }
  Processor(const Processor&) = delete;
  Processor& operator=(const Processor&) = delete;
  std::vector<std::string> encode(const std::string& text) const {
    std::vector<std::string> pieces;
    std::string error;
    if (!sentencepiece_module().encode(handle, text, &pieces, &error))
      throw Error(fmt::format("Marian tokenizer: {}", one_line(error)));
    return pieces;
  }
  std::string decode(const std::vector<std::string>& pieces) const {
    std::string text, error;
    if (!sentencepiece_module().decode(handle, pieces, &text, &error))
      throw Error(fmt::format("Marian tokenizer: {}", one_line(error)));
    return text;
  }
};

namespace {

nlohmann::json read_json(const fs::path& path) {
  try {
    return nlohmann::json::parse(read_file(path, "Marian tokenizer file"));
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: not valid JSON ({})", path.string(), one_line(e.what())));
  }
}

// vocab.json's tokens and ids as Python's json.load reads the object into a dict: tokens in the order
// they first appear, each with the id of its last appearance (transformers then maps an id repeated
// by several tokens back to the last of them). Read as parse events: the document tree of a 58,000
// token vocabulary, its map nodes and their teardown took ~45 ms of Marian's start.
class VocabularyEvents final : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit VocabularyEvents(const fs::path& path) : path_(path.string()) {}
  std::vector<std::pair<std::string, int64_t>> entries;
  std::string error;  // set when a value is not what vocab.json holds (the parse stops there)

  bool start_object(std::size_t) override {
    if (depth_++ == 0) return true;
    return refuse("an object");
  }
  bool end_object() override {
    --depth_;
    return true;
  }
  bool key(string_t& token) override {
    key_ = std::move(token);
    return true;
  }
  bool number_unsigned(number_unsigned_t id) override {
    if (id > static_cast<number_unsigned_t>(INT64_MAX)) return refuse(std::to_string(id));
    return add(static_cast<int64_t>(id));
  }
  bool number_integer(number_integer_t id) override {
    return id < 0 ? refuse(std::to_string(id)) : add(id);
  }
  bool number_float(number_float_t, const string_t& text) override { return refuse(text); }
  bool null() override { return refuse("null"); }
  bool boolean(bool value) override { return refuse(value ? "true" : "false"); }
  bool string(string_t& value) override { return refuse("a string"); }
  bool binary(binary_t&) override { return refuse("binary data"); }
  bool start_array(std::size_t) override { return refuse("an array"); }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error = fmt::format("{}: not valid JSON ({})", path_, one_line(e.what()));
    return false;
  }

 private:
  bool add(int64_t id) {
    if (depth_ != 1) return refuse("a number");
    const auto [it, inserted] = position_.emplace(key_, entries.size());
    if (inserted)
      entries.emplace_back(std::move(key_), id);
    else
      entries[it->second].second = id;
    return true;
  }
  bool refuse(const std::string& what) {
    error = depth_ == 0 ? fmt::format("{}: expected an object of token -> id", path_)
                        : fmt::format("{}: token '{}' has no non-negative integer id (it has {})", path_,
                                      one_line(key_), one_line(what));
    return false;
  }
  std::string path_;
  int depth_ = 0;
  std::string key_;
  std::unordered_map<std::string, size_t> position_;
};

// transformers' clean_up_tokenization (decode's clean_up_tokenization_spaces, on by default).
std::string clean_up_tokenization(std::string s) {
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
           {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}})
    replace_all(s, from, to);
  return s;
}

std::string strip(const std::string& s) {
  const auto begin = s.find_first_not_of(" \t\n\r\f\v");
  if (begin == std::string::npos) return "";
  const auto end = s.find_last_not_of(" \t\n\r\f\v");
  return s.substr(begin, end - begin + 1);
}

}  // namespace

bool MarianTokenizer::found_in(const std::string& directory) {
  std::error_code ec;
  return fs::exists(fs::path(directory) / "source.spm", ec) && fs::exists(fs::path(directory) / "vocab.json", ec);
}

MarianTokenizer::MarianTokenizer(const std::string& directory) : directory_(directory) {
  const fs::path dir(directory);
  unk_ = "<unk>";
  eos_ = "</s>";
  pad_ = "<pad>";
  const fs::path config_path = dir / "tokenizer_config.json";
  if (fs::exists(config_path)) {
    const auto config = read_json(config_path);
    auto name = [&](const char* key, std::string& out) {
      if (!config.is_object() || !config.contains(key) || config[key].is_null()) return;
      const auto& v = config[key];
      if (v.is_string()) out = v.get<std::string>();
      else if (v.is_object() && v.contains("content") && v["content"].is_string()) out = v["content"].get<std::string>();
      else throw Error(fmt::format("{}: '{}' must be a token", config_path.string(), key));
    };
    name("unk_token", unk_);
    name("eos_token", eos_);
    name("pad_token", pad_);
    if (config.is_object() && config.value("separate_vocabs", false))
      throw Error(fmt::format("{}: separate_vocabs = true (a target_vocab_file) is not supported",
                              config_path.string()));
  }
  source_ = std::make_unique<Processor>(dir / "source.spm");
  target_ = std::make_unique<Processor>(fs::exists(dir / "target.spm") ? dir / "target.spm" : dir / "source.spm");
  const fs::path vocab_path = dir / "vocab.json";
  VocabularyEvents events(vocab_path);
  const std::string content = read_file(vocab_path, "Marian tokenizer file");
  if (!nlohmann::json::sax_parse(content, &events) || !events.error.empty())
    throw Error(events.error.empty() ? fmt::format("{}: not valid JSON", vocab_path.string()) : events.error);
  vocab_.reserve(events.entries.size());
  id_to_token_.reserve(events.entries.size());
  for (auto& [token, id] : events.entries) {
    vocab_.emplace(token, id);
    id_to_token_[id] = std::move(token);  // a repeated id: the last token, as transformers' dict
  }
  for (const auto* token : {&unk_, &pad_, &eos_})
    if (!vocab_.count(*token))
      throw Error(fmt::format("{}: the special token '{}' is not in the vocabulary", vocab_path.string(),
                              one_line(*token)));
  unk_id_ = vocab_.at(unk_);
  eos_id_ = vocab_.at(eos_);
  pad_id_ = vocab_.at(pad_);
}

MarianTokenizer::~MarianTokenizer() = default;
MarianTokenizer::MarianTokenizer(MarianTokenizer&&) noexcept = default;
MarianTokenizer& MarianTokenizer::operator=(MarianTokenizer&&) noexcept = default;

std::vector<std::string> MarianTokenizer::pieces(std::string_view text, bool target) const {
  std::vector<std::string> out;
  // transformers' language_code_re ">>.+<<": a match at the start is kept as one token, and every
  // match is removed from the text (greedy: up to the last "<<" of its line).
  const std::string given(text);
  std::string rest;
  size_t pos = 0;
  while (pos < given.size()) {
    const size_t at = given.find(">>", pos);
    if (at == std::string::npos) {
      rest += given.substr(pos);
      break;
    }
    const size_t line_end = std::min(given.find('\n', at), given.size());
    const size_t close = line_end >= at + 5 ? given.rfind("<<", line_end - 2) : std::string::npos;
    if (close != std::string::npos && close >= at + 3) {
      if (at == 0) out.push_back(given.substr(0, close + 2));
      rest += given.substr(pos, at - pos);
      pos = close + 2;
    } else {
      rest += given.substr(pos, at + 1 - pos);
      pos = at + 1;
    }
  }
  const std::vector<std::string> cut = (target ? target_ : source_)->encode(rest);
  out.insert(out.end(), cut.begin(), cut.end());
  return out;
}

std::vector<int64_t> MarianTokenizer::encode(std::string_view text, bool add_eos) const {
  std::vector<int64_t> ids;
  for (const auto& piece : pieces(text)) {
    auto it = vocab_.find(piece);
    ids.push_back(it == vocab_.end() ? unk_id_ : it->second);
  }
  if (add_eos) ids.push_back(eos_id_);
  return ids;
}

std::vector<int64_t> MarianTokenizer::encode_target(std::string_view text, bool add_eos) const {
  std::vector<int64_t> ids;
  for (const auto& piece : pieces(text, /*target=*/true)) {
    auto it = vocab_.find(piece);
    ids.push_back(it == vocab_.end() ? unk_id_ : it->second);
  }
  if (add_eos) ids.push_back(eos_id_);
  return ids;
}

std::string MarianTokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  for (int64_t id : ids) {
    auto it = id_to_token_.find(id);
    const std::string& token = it == id_to_token_.end() ? unk_ : it->second;
    const bool special = token == unk_ || token == eos_ || token == pad_;
    if (skip_special_tokens && special) continue;
    tokens.push_back(token);
  }
  // MarianTokenizer.convert_tokens_to_string: special tokens verbatim, the rest through target.spm.
  std::string out;
  std::vector<std::string> run;
  auto flush = [&] {
    out += target_->decode(run);
    run.clear();
  };
  for (const auto& token : tokens) {
    if (token == unk_ || token == eos_ || token == pad_) {
      flush();
      out += token + " ";
    } else {
      run.push_back(token);
    }
  }
  flush();
  replace_all(out, kSpaceMark, " ");
  return clean_up_tokenization(strip(out));
}

std::optional<int64_t> MarianTokenizer::token_to_id(const std::string& token) const { return id_of(token); }

std::optional<int64_t> MarianTokenizer::id_of(std::string_view token) const {
  auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* MarianTokenizer::token_of(int64_t id) const {
  auto it = id_to_token_.find(id);
  return it == id_to_token_.end() ? nullptr : &it->second;
}

SpecialTokenIds MarianTokenizer::special_ids() const {
  SpecialTokenIds out;
  out.end = eos_id_;
  out.pad = pad_id_;
  out.unknown = unk_id_;
  return out;
}

std::vector<int64_t> MarianTokenizer::do_encode_ids(std::string_view text, bool add_eos, TextSide side) const {
  return side == TextSide::kTarget ? encode_target(text, add_eos) : encode(text, add_eos);
}

// The style changes WordPiece's text only; SentencePiece joins its pieces itself.
std::string MarianTokenizer::do_decode_ids(const std::vector<int64_t>& ids, bool skip_special_tokens,
                                           TextStyle) const {
  return decode(ids, skip_special_tokens);
}

}  // namespace attnkit::text
