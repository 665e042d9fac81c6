#include "attnkit/text/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <condition_variable>
#include <functional>
#include <exception>
#include <mutex>
#include <thread>

#include "attnkit/error.h"
#include "attnkit/text/bpe.h"
#include "attnkit/text/byte_level_bpe.h"
#include "attnkit/text/unicode.h"
#include "attnkit/text/unigram.h"
#include "attnkit/text/wordpiece.h"

namespace attnkit::text {
namespace {

void push_token(Encoding& encoding, uint32_t id, const std::string& token, uint32_t begin, uint32_t end,
                int32_t sequence_id) {
  encoding.ids.push_back(id);
  encoding.type_ids.push_back(0);
  encoding.tokens.push_back(token);
  encoding.offsets.emplace_back(begin, end);
  encoding.special_tokens_mask.push_back(0);
  encoding.attention_mask.push_back(1);
  encoding.sequence_ids.push_back(sequence_id);
}

// Batch encoding runs on long-lived workers, so the per-thread caches of the models (byte-level
// BPE's word cache) stay warm from one batch to the next. The caller is worker 0. One batch at a
// time uses the pool; a batch that finds it busy (another thread's, or a nested one) runs on
// threads of its own.
class WorkerPool {
 public:
  static WorkerPool& instance() {
    static WorkerPool* pool = new WorkerPool;  // never destroyed: workers may outlive static destructors
    return *pool;
  }

  // Runs task(0) ... task(count - 1) on `count` threads (task(0) on the caller) and waits.
  void run(size_t count, const std::function<void(size_t)>& task) {
    std::unique_lock busy(run_mutex_, std::try_to_lock);
    if (!busy.owns_lock()) {
      std::vector<std::thread> own;
      for (size_t w = 1; w < count; ++w) own.emplace_back(task, w);
      task(0);
      for (auto& thread : own) thread.join();
      return;
    }
    {
      std::lock_guard lock(mutex_);
      while (threads_.size() + 1 < count) {
        const size_t index = threads_.size() + 1;
        threads_.emplace_back([this, index, seen = generation_] { work(index, seen); });
        threads_.back().detach();
      }
      task_ = &task;
      wanted_ = count;
      remaining_ = count - 1;
      ++generation_;
    }
    wake_.notify_all();
    task(0);
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return remaining_ == 0; });
    task_ = nullptr;
  }

 private:
  // `seen`: the last generation before this worker was made (it waits for the next one).
  void work(size_t index, uint64_t seen) {
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      if (index >= wanted_) continue;
      const auto* task = task_;
      lock.unlock();
      (*task)(index);
      lock.lock();
      if (--remaining_ == 0) done_.notify_one();
    }
  }

  std::mutex run_mutex_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  std::vector<std::thread> threads_;
  const std::function<void(size_t)>* task_ = nullptr;
  uint64_t generation_ = 0;
  size_t wanted_ = 0;
  size_t remaining_ = 0;
};

size_t resolve_threads(int threads, size_t work) {
  size_t count = threads > 0 ? static_cast<size_t>(threads) : std::max(1u, std::thread::hardware_concurrency());
  return std::max<size_t>(1, std::min(count, work));
}

}  // namespace

Tokenizer::Tokenizer(TokenizerParts parts) : parts_(std::move(parts)) {
  if (!parts_.model) throw Error("tokenizer: no model");
  byte_level_ = dynamic_cast<const ByteLevelBpe*>(parts_.model.get()) != nullptr;
  const bool sequence = std::holds_alternative<SequencePreTokenizer>(parts_.pre_tokenizer);
  if (byte_level_ && !ends_in_byte_level(parts_.pre_tokenizer)) {
    throw Error("tokenizer: a byte-level BPE model needs the ByteLevel pre-tokenizer (alone or last in a Sequence)");
  }
  if (!byte_level_ && sequence && contains_byte_level(parts_.pre_tokenizer)) {
    throw Error("tokenizer: a pre-tokenizer Sequence with a ByteLevel step needs a byte-level BPE model");
  }
  for (const auto* pieces : {&parts_.post_processor.single, &parts_.post_processor.pair}) {
    for (const auto& piece : *pieces) {
      if (!piece.is_sequence && !parts_.post_processor.special_tokens.count(piece.special_token)) {
        throw Error(fmt::format("tokenizer: the post-processor template uses '{}' without giving its id", piece.special_token));
      }
    }
  }
  // Every id the post-processor inserts must decode: a special token whose id is in neither the
  // vocabulary nor the added tokens (e.g. after a duplicate vocabulary key kept only the last id)
  // made encode's own output fail in decode (a fuzz finding).
  for (const auto& [name, special] : parts_.post_processor.special_tokens) {
    for (const uint32_t id : special.ids) {
      if (id_to_token(id) == nullptr)
        throw Error(fmt::format("tokenizer: the post-processor's special token '{}' has id {}, which is "
                                "neither in the vocabulary nor an added token", name, id));
    }
  }
}

Encoding Tokenizer::encode_text(std::string_view text, int32_t sequence_id) const {
  const auto invalid = byte_level_ ? unicode::InvalidUtf8::kKeepBytes : unicode::InvalidUtf8::kReplace;
  const AlignedText original = AlignedText::identity(unicode::decode_utf8(text, invalid));
  const Vocabulary& vocabulary = parts_.model->vocabulary();
  Encoding encoding;
  std::vector<ModelToken> model_tokens;

  auto add_added_token = [&](const AddedToken& token, uint32_t begin, uint32_t end) {
    push_token(encoding, token.id, token.content, begin, end, sequence_id);
  };
  bool first_part = true;  // for Metaspace's "first" prepend scheme
  for (const TextSegment& raw : parts_.added_tokens.split(original, /*normalized=*/false)) {
    if (raw.token != nullptr) {
      add_added_token(*raw.token, static_cast<uint32_t>(raw.begin), static_cast<uint32_t>(raw.end));
      continue;
    }
    AlignedText piece = original.slice(raw.begin, raw.end);
    if (parts_.normalizer) piece = normalize(*parts_.normalizer, piece);
    for (const TextSegment& segment : parts_.added_tokens.split(piece, /*normalized=*/true)) {
      if (segment.token != nullptr) {
        add_added_token(*segment.token, piece.origin[segment.begin], piece.origin[segment.end - 1] + 1);
        continue;
      }
      const AlignedText part = segment.begin == 0 && segment.end == piece.size() ? piece : piece.slice(segment.begin, segment.end);
      if (part.empty()) continue;
      const bool first = first_part;
      first_part = false;
      for (const Word& word : text::pre_tokenize(parts_.pre_tokenizer, part, first)) {
        model_tokens.clear();
        parts_.model->tokenize(word.bytes, model_tokens);
        for (const ModelToken& token : model_tokens) {
          push_token(encoding, token.id, *vocabulary.token(token.id), word.byte_origin[token.begin],
                     word.byte_origin[token.end - 1] + 1, sequence_id);
        }
      }
    }
  }
  return encoding;
}

Encoding Tokenizer::finish(Encoding first, Encoding* second, bool add_special_tokens) const {
  if (parts_.truncation) {
    TruncationOptions options = *parts_.truncation;
    const size_t added = add_special_tokens ? parts_.post_processor.added_tokens(second != nullptr) : 0;
    if (options.max_length < added) {
      throw Error(fmt::format("truncation: max length {} is shorter than the {} special tokens the tokenizer adds",
                              options.max_length, added));
    }
    options.max_length -= added;
    truncate_encodings(first, second, options);
  }
  Encoding out = parts_.post_processor.process(std::move(first), second, add_special_tokens);
  if (parts_.padding) pad_encoding(out, parts_.padding->length.value_or(out.size()), *parts_.padding);
  return out;
}

Encoding Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  return finish(encode_text(text, 0), nullptr, add_special_tokens);
}

Encoding Tokenizer::encode_pair(std::string_view first, std::string_view second, bool add_special_tokens) const {
  Encoding second_encoding = encode_text(second, 1);
  return finish(encode_text(first, 0), &second_encoding, add_special_tokens);
}

std::vector<Encoding> Tokenizer::encode_batch(const std::vector<EncodeInput>& inputs, int threads,
                                              bool add_special_tokens) const {
  std::vector<Encoding> out(inputs.size());
  auto encode_one = [&](size_t i) {
    const EncodeInput& input = inputs[i];
    out[i] = input.second ? encode_pair(input.first, *input.second, add_special_tokens) : encode(input.first, add_special_tokens);
  };
  const size_t workers = resolve_threads(threads, inputs.size());
  if (workers <= 1) {
    for (size_t i = 0; i < inputs.size(); ++i) encode_one(i);
  } else {
    constexpr size_t kChunk = 64;
    std::atomic<size_t> next{0};
    std::exception_ptr failure;
    std::mutex failure_mutex;
    WorkerPool::instance().run(workers, [&](size_t) {
      try {
        for (size_t begin = next.fetch_add(kChunk); begin < inputs.size(); begin = next.fetch_add(kChunk)) {
          for (size_t i = begin; i < std::min(begin + kChunk, inputs.size()); ++i) encode_one(i);
        }
      } catch (...) {
        std::lock_guard lock(failure_mutex);
        if (!failure) failure = std::current_exception();
        next = inputs.size();
      }
    });
    if (failure) std::rethrow_exception(failure);
  }
  if (parts_.padding && !parts_.padding->length) {
    size_t longest = 0;
    for (const auto& encoding : out) longest = std::max(longest, encoding.size());
    for (auto& encoding : out) pad_encoding(encoding, longest, *parts_.padding);
  }
  return out;
}

std::optional<uint32_t> Tokenizer::token_to_id(std::string_view token) const {
  for (const auto& added : parts_.added_tokens.tokens()) {
    if (added.content == token) return added.id;
  }
  return parts_.model->vocabulary().find(token);
}

const std::string* Tokenizer::id_to_token(uint32_t id) const {
  if (const AddedToken* added = parts_.added_tokens.find_by_id(id)) return &added->content;
  return parts_.model->vocabulary().token(id);
}

size_t Tokenizer::vocab_size() const {
  size_t size = parts_.model->vocabulary().size();
  for (const auto& added : parts_.added_tokens.tokens()) {
    if (!parts_.model->vocabulary().token(added.id)) ++size;
  }
  return size;
}

std::string Tokenizer::decode(const std::vector<uint32_t>& ids, bool skip_special_tokens, TextStyle style) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (uint32_t id : ids) {
    const AddedToken* added = parts_.added_tokens.find_by_id(id);
    if (added != nullptr && added->special && skip_special_tokens) continue;
    const std::string* token = id_to_token(id);
    if (token == nullptr) {
      throw Error(fmt::format("decode: id {} is not in the vocabulary ({} tokens)", id, vocab_size()));
    }
    tokens.push_back(*token);
  }
  std::string text = decode_tokens(parts_.decoder, tokens);
  if (style == TextStyle::kReadable && std::holds_alternative<WordPieceDecoder>(parts_.decoder))
    text = join_cjk(text);
  return text;
}

std::vector<int64_t> Tokenizer::do_encode_ids(std::string_view text, bool add_special_tokens, TextSide) const {
  const std::vector<uint32_t> ids = encode(text, add_special_tokens).ids;
  return std::vector<int64_t>(ids.begin(), ids.end());
}

std::string Tokenizer::do_decode_ids(const std::vector<int64_t>& ids, bool skip_special_tokens, TextStyle style) const {
  // Converted as the commands always have (an id outside uint32 wraps, and decode names it).
  return decode(std::vector<uint32_t>(ids.begin(), ids.end()), skip_special_tokens, style);
}

std::optional<int64_t> Tokenizer::id_of(std::string_view token) const {
  if (const auto id = token_to_id(token)) return *id;
  return std::nullopt;
}

const std::string* Tokenizer::token_of(int64_t id) const {
  if (id < 0 || id > int64_t(UINT32_MAX)) return nullptr;
  return id_to_token(static_cast<uint32_t>(id));
}

SpecialTokenIds Tokenizer::special_ids() const {
  SpecialTokenIds out;
  if (const auto* wordpiece = dynamic_cast<const WordPiece*>(parts_.model.get())) {
    if (const auto id = wordpiece->vocabulary().find(wordpiece->options().unk_token)) out.unknown = *id;
  } else if (const auto* unigram = dynamic_cast<const Unigram*>(parts_.model.get())) {
    if (const auto id = unigram->unk_id()) out.unknown = *id;
  } else if (const auto* bpe = dynamic_cast<const Bpe*>(parts_.model.get())) {
    if (const auto id = bpe->unk_id()) out.unknown = *id;
  }
  if (parts_.padding) out.pad = parts_.padding->pad_id;
  return out;
}

void Tokenizer::set_truncation(std::optional<TruncationOptions> truncation) { parts_.truncation = std::move(truncation); }

void Tokenizer::set_padding(std::optional<PaddingOptions> padding) { parts_.padding = std::move(padding); }

}  // namespace attnkit::text
