// Hugging Face RoBERTa (model_type "roberta"; RobertaModel, RobertaForMaskedLM,
// RobertaForSequenceClassification, RobertaForTokenClassification, RobertaForQuestionAnswering):
// the family's record. The body is BERT's (hf_bert_like.cpp's base names under "roberta."); what
// differs is config.json's positions (a table of max_position_embeddings rows whose first
// pad_token_id + 1 rows precede position 0, padding tokens reading row pad_token_id:
// TransformerConfig::padding_positions) and the heads: "lm_head." (dense, GELU, layer_norm,
// decoder tied to the word embeddings, bias), and a classification head "classifier.dense" (tanh
// over the first token: attnkit's pooler) + "classifier.out_proj".
#include "hf_bert_like.h"

#include <fmt/format.h>

#include <algorithm>

namespace attnkit::io::detail {
namespace {

using models::HeadsConfig;
using models::TransformerConfig;
using nlohmann::json;

TransformerConfig roberta_config_from_json(const json& j) {
  TransformerConfig c = bert_like_config_from_json(j, false);
  c.padding_positions = true;
  c.set_pad_token_id(value_or<int64_t>(j, "pad_token_id", 1));
  if (c.pad_token_id < 0)
    throw Error(fmt::format("config.json: pad_token_id {} is negative", c.pad_token_id));
  const int64_t table = value_or<int64_t>(j, "max_position_embeddings", 514);
  if (table <= c.position_id_offset)
    throw Error(fmt::format("config.json: max_position_embeddings {} leaves no position after the "
                            "{} rows RoBERTa reserves (pad_token_id + 1)",
                            table, c.position_id_offset));
  c.max_positions = table - c.position_id_offset;
  c.pooler = false;  // detect_heads sets it from the checkpoint
  return c;
}

json roberta_config_to_json(const TransformerConfig& c, const HeadsConfig& h) {
  require_expressible(c.padding_positions && c.type_vocab_size > 0, c,
                      "RoBERTa counts positions past the padding (padding_positions) and has a "
                      "token-type table");
  require_expressible(h.next_sentence == 0, c, "RoBERTa has no next-sentence head");
  require_expressible(!h.masked_lm || c.activation == layers::Activation::Gelu, c,
                      "RoBERTa's lm_head applies gelu; the model's activation differs");
  require_expressible(h.sequence_labels == 0 || (h.sequence_pooling == models::Pooling::Pooler && c.pooler),
                      c, "RoBERTa's classification head is the tanh dense over the first token "
                         "(pooling 'pooler')");
  json j = bert_like_config_to_json(c, h, false);
  std::string arch = j["architectures"][0].get<std::string>();
  arch.replace(0, std::string("Bert").size(), "Roberta");
  j["architectures"] = {arch};
  j["model_type"] = "roberta";
  j["max_position_embeddings"] = c.max_positions + c.position_id_offset;
  if (h.masked_lm && !h.tie_lm) j["tie_word_embeddings"] = false;
  return j;
}

std::vector<NameRule> roberta_rules(const TransformerConfig& c, const HeadsConfig& h) {
  // The body under BERT's names, without its pooler and heads.
  TransformerConfig body = c;
  body.pooler = false;
  std::vector<NameRule> r = bert_like_rules(body, HeadsConfig{}, false);
  const auto head = Stack::Heads;
  const bool classifier = h.sequence_labels > 0;
  // RobertaClassificationHead's dense + tanh over the first token is attnkit's pooler.
  if (c.pooler && classifier) add_dense(r, "classifier.dense", "transformer.pooler", head);
  else if (c.pooler) add_dense(r, "pooler.dense", "pooler", Stack::Encoder);
  if (h.masked_lm) {
    add_dense(r, "lm_head.dense", "masked_lm.dense", head);
    add_dense(r, "lm_head.layer_norm", "masked_lm.norm", head);
    r.push_back({"lm_head.bias", "masked_lm.bias", head});
    if (!h.tie_lm) r.push_back({"lm_head.decoder.weight", "masked_lm.decoder", head});
  }
  if (classifier) add_dense(r, "classifier.out_proj", "classifier", head);
  if (h.token_labels > 0) add_dense(r, "classifier", "tagger", head);
  if (h.span) add_dense(r, "qa_outputs", "span", head);
  return r;
}

std::vector<TiedAlias> roberta_aliases(const HeadsConfig& h) {
  std::vector<TiedAlias> a;
  if (!h.masked_lm) return a;
  if (h.tie_lm) a.push_back({"lm_head.decoder.weight", "@embeddings.word_embeddings.weight"});
  a.push_back({"lm_head.decoder.bias", "lm_head.bias"});
  return a;
}

void roberta_detect_heads(const CheckpointContents& contents, const json& cj, HuggingFaceConfig& config) {
  TransformerConfig& c = config.stack;
  HeadsConfig& h = config.heads;
  c.type_vocab_size =
      contents.has(contents.base("embeddings.token_type_embeddings.weight")) ? c.type_vocab_size : 0;
  h.masked_lm = contents.has_any_with_prefix("lm_head.");
  if (h.masked_lm && c.activation != layers::Activation::Gelu)
    throw Error(fmt::format("config.json: hidden_act {} with lm_head is not supported (RoBERTa's "
                            "lm_head applies gelu, attnkit's masked-LM head the model's activation)",
                            quoted(layers::activation_name(c.activation))));
  const std::string words = contents.base("embeddings.word_embeddings.weight");
  if (h.masked_lm && contents.has("lm_head.decoder.weight") && contents.has(words))
    h.tie_lm = contents.same_values("lm_head.decoder.weight", words);
  if (contents.has("classifier.out_proj.weight")) {
    h.sequence_labels = contents.rows("classifier.out_proj.weight");
    h.sequence_pooling = models::Pooling::Pooler;
    c.pooler = true;
  } else {
    c.pooler = contents.has(contents.base("pooler.dense.weight"));
    if (contents.has("classifier.weight")) h.token_labels = contents.rows("classifier.weight");
  }
  h.span = contents.has("qa_outputs.weight");
  if (value_or<double>(cj, "classifier_dropout", -1.0) >= 0)
    h.classifier_dropout = value<double>(cj, "classifier_dropout");
}

}  // namespace

const HuggingFaceFamily& roberta_family() {
  static const HuggingFaceFamily family{
      "roberta",
      {"Roberta"},
      "roberta.",
      {Stack::Encoder, Stack::Heads},
      HeadPruning::InConfig,
      [](const json& j) { return HuggingFaceConfig{roberta_config_from_json(j)}; },
      [](const HuggingFaceConfig& c) { return roberta_config_to_json(c.stack, c.heads); },
      [](const HuggingFaceConfig& c) { return roberta_rules(c.stack, c.heads); },
      [](const HuggingFaceConfig& c) { return roberta_aliases(c.heads); },
      kBertLikeBuffers,
      roberta_detect_heads,
  };
  return family;
}

}  // namespace attnkit::io::detail
