// The translation pipeline (train/translation.h).
#include "attnkit/train/translation.h"

#include "attnkit/decode/language_models.h"
#include "attnkit/models/batching.h"

#include <algorithm>

namespace attnkit::train {

std::vector<TranslationPair> encode_translation_pairs(const data::Seq2SeqData& data,
                                                      const text::TextTokenizer& tokenizer,
                                                      bool source_special_tokens, int64_t limit) {
  std::vector<TranslationPair> rows;
  for (const auto& e : data.examples) {
    if (limit > 0 && static_cast<int64_t>(rows.size()) >= limit) break;
    auto source = tokenizer.encode_ids(e.source, source_special_tokens);
    auto target = tokenizer.encode_ids(e.target, /*add_special_tokens=*/false, text::TextSide::kTarget);
    if (source.empty() || target.empty()) continue;  // nothing the tokenizer keeps
    rows.push_back(TranslationPair{std::move(source), std::move(target), e.target});
  }
  return rows;
}

void cut_translation_pairs(std::vector<TranslationPair>& pairs, int64_t source_length,
                           int64_t target_length) {
  for (auto& p : pairs) {
    if (static_cast<int64_t>(p.source.size()) > source_length) p.source.resize(source_length);
    if (static_cast<int64_t>(p.target.size()) > target_length) p.target.resize(target_length);
  }
}

TranslationBatch translation_batch(const std::vector<const TranslationPair*>& rows,
                                   const TranslationTokens& tokens) {
  std::vector<std::vector<int64_t>> sources, inputs, labels;
  for (const auto* r : rows) {
    sources.push_back(r->source);
    std::vector<int64_t> in{tokens.start};
    in.insert(in.end(), r->target.begin(), r->target.end());
    std::vector<int64_t> out = r->target;
    out.push_back(tokens.eos);
    inputs.push_back(std::move(in));
    labels.push_back(std::move(out));
  }
  TranslationBatch b;
  auto [source, source_mask] = models::right_padded_ids(sources, tokens.pad);
  auto [input, target_mask] = models::right_padded_ids(inputs, tokens.pad);
  b.source = source;
  b.source_mask = source_mask;
  b.decoder_input = input;
  b.target_mask = target_mask;
  b.labels = models::right_padded_ids(labels, models::kIgnoreLabel).ids;
  return b;
}

std::vector<std::vector<int64_t>> translate(models::EncoderDecoderModelImpl& model,
                                            const std::vector<std::vector<int64_t>>& sources,
                                            const decode::GenerationConfig& config,
                                            const TranslationTokens& tokens, int64_t batch_size) {
  std::vector<std::vector<int64_t>> out;
  const size_t batch = batch_size > 0 ? static_cast<size_t>(batch_size) : std::max<size_t>(sources.size(), 1);
  for (size_t first = 0; first < sources.size(); first += batch) {
    models::DecodingRequest request;
    request.prompts.assign(sources.begin() + static_cast<std::ptrdiff_t>(first),
                           sources.begin() + static_cast<std::ptrdiff_t>(std::min(sources.size(), first + batch)));
    request.decoder_start_token_id = tokens.start;
    request.source_pad_id = tokens.pad;
    models::Decoding decoding = decode::start_decoding(model, request);
    for (auto& result : decode::generate(*decoding.session, decoding.prompts, config)) {
      std::vector<int64_t> ids = std::move(result.front().tokens);
      if (!ids.empty() && !config.eos_token_ids.empty() && ids.back() == config.eos_token_ids.front())
        ids.pop_back();
      out.push_back(std::move(ids));
    }
  }
  return out;
}

}  // namespace attnkit::train
