#include "hf_bert_like.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

namespace attnkit::io::detail {

using models::HeadsConfig;
using models::TransformerConfig;
using nlohmann::json;

TransformerConfig bert_like_config_from_json(const json& j, bool albert) {
  const int64_t vocab = value<int64_t>(j, "vocab_size"), hidden = value<int64_t>(j, "hidden_size");
  const int64_t layers = value<int64_t>(j, "num_hidden_layers");
  const int64_t heads = value<int64_t>(j, "num_attention_heads");
  const int64_t intermediate = value<int64_t>(j, "intermediate_size");
  TransformerConfig c;
  if (albert) {
    c = TransformerConfig::albert(vocab, value_or<int64_t>(j, "embedding_size", 128), hidden,
                                  layers, heads, intermediate);
    c.layer_groups = value_or<int64_t>(j, "num_hidden_groups", 1);
    const int64_t inner = value_or<int64_t>(j, "inner_group_num", 1);
    if (inner != 1)
      throw Error(fmt::format("config.json: inner_group_num = {} is not supported (only 1)", inner));
  } else {
    c = TransformerConfig::bert(vocab, hidden, layers, heads, intermediate);
    reject_true(j, "is_decoder", "BERT as a decoder");
    reject_true(j, "add_cross_attention", "BERT with cross attention");
  }
  c.activation = activation_or(j, "hidden_act", albert ? "gelu_new" : "gelu");
  c.max_positions = value_or<int64_t>(j, "max_position_embeddings", 512);
  c.type_vocab_size = value_or<int64_t>(j, "type_vocab_size", 2);
  c.layer_norm_eps = value_or<double>(j, "layer_norm_eps", 1e-12);
  c.dropout = value_or<double>(j, "hidden_dropout_prob", albert ? 0.0 : 0.1);
  c.attention_dropout = value_or<double>(j, "attention_probs_dropout_prob", albert ? 0.0 : 0.1);
  c.pad_token_id = value_or<int64_t>(j, "pad_token_id", 0);
  const auto positions = value_or<std::string>(j, "position_embedding_type", "absolute");
  if (positions != "absolute")
    throw Error(fmt::format("config.json: position_embedding_type {} is not supported (only "
                            "absolute)", quoted(positions)));
  return c;
}

json bert_like_config_to_json(const TransformerConfig& c, const HeadsConfig& h, bool albert) {
  require_expressible(!c.norm_first && !c.final_layer_norm && c.embedding_layer_norm &&
                          !c.attention.causal && c.share_layers == albert,
                      c, "the switches differ from the family's (post-LN, bidirectional)");
  std::string arch = albert ? "AlbertModel" : "BertModel";
  const std::string family = albert ? "Albert" : "Bert";
  if (h.masked_lm && h.next_sentence > 0) arch = family + "ForPreTraining";
  else if (h.masked_lm) arch = family + "ForMaskedLM";
  else if (h.sequence_labels > 0) arch = family + "ForSequenceClassification";
  else if (h.token_labels > 0) arch = family + "ForTokenClassification";
  else if (h.span) arch = family + "ForQuestionAnswering";
  json j = {{"model_type", albert ? "albert" : "bert"},
            {"architectures", {arch}},
            {"vocab_size", c.vocab_size}, {"hidden_size", c.hidden},
            {"num_hidden_layers", c.layers}, {"num_attention_heads", c.heads},
            {"intermediate_size", c.intermediate},
            {"hidden_act", layers::activation_name(c.activation)},
            {"max_position_embeddings", c.max_positions}, {"type_vocab_size", c.type_vocab_size},
            {"layer_norm_eps", c.layer_norm_eps}, {"hidden_dropout_prob", c.dropout},
            {"attention_probs_dropout_prob", c.attention_dropout}, {"pad_token_id", c.pad_token_id},
            {"position_embedding_type", "absolute"}, {"initializer_range", 0.02}};
  if (albert) {
    j["embedding_size"] = c.effective_embedding_size();
    j["num_hidden_groups"] = c.layer_groups;
    j["inner_group_num"] = 1;
  }
  const int64_t labels = std::max(h.sequence_labels, h.token_labels);
  if (labels > 0) j.update(label_maps(labels));
  return j;
}

std::vector<NameRule> bert_like_rules(const TransformerConfig& c, const HeadsConfig& h, bool albert) {
  std::vector<NameRule> r;
  const auto body = Stack::Encoder;
  r.push_back({"embeddings.word_embeddings.weight", "embeddings.token.weight", body});
  r.push_back({"embeddings.position_embeddings.weight", "embeddings.position.weight", body});
  if (c.type_vocab_size > 0)
    r.push_back({"embeddings.token_type_embeddings.weight", "embeddings.token_type.weight", body});
  add_dense(r, "embeddings.LayerNorm", "embeddings.norm", body);
  // attnkit's names of a block's parts, and each family's names of the same parts in that order.
  static constexpr std::array<const char*, 8> kOurs{"attention.q",  "attention.k", "attention.v",
                                                    "attention.o",  "ln_attention", "ffn.fc_in",
                                                    "ffn.fc_out", "ln_ffn"};
  struct BlockNames {
    const char* layer;
    std::array<const char*, 8> parts;
    const char* pooler;
  };
  static constexpr BlockNames kBert{
      "encoder.layer.{layer}.",
      {"attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
       "attention.output.LayerNorm", "intermediate.dense", "output.dense", "output.LayerNorm"},
      "pooler.dense"};
  static constexpr BlockNames kAlbert{
      "encoder.albert_layer_groups.{layer}.albert_layers.0.",
      {"attention.query", "attention.key", "attention.value", "attention.dense", "attention.LayerNorm",
       "ffn", "ffn_output", "full_layer_layer_norm"},
      "pooler"};
  if (albert) add_dense(r, "encoder.embedding_hidden_mapping_in", "embeddings.projection", body);
  const BlockNames& names = albert ? kAlbert : kBert;
  for (size_t i = 0; i < kOurs.size(); ++i)
    add_dense(r, std::string(names.layer) + names.parts[i], std::string("blocks.{layer}.") + kOurs[i], body);
  if (c.pooler) add_dense(r, names.pooler, "pooler", body);
  const auto head = Stack::Heads;
  if (h.masked_lm) {
    const std::string mlm = albert ? "predictions." : "cls.predictions.";
    add_dense(r, mlm + (albert ? "dense" : "transform.dense"), "masked_lm.dense", head);
    add_dense(r, mlm + (albert ? "LayerNorm" : "transform.LayerNorm"), "masked_lm.norm", head);
    r.push_back({mlm + "bias", "masked_lm.bias", head});
    if (!h.tie_lm) r.push_back({mlm + "decoder.weight", "masked_lm.decoder", head});
  }
  if (h.next_sentence > 0)
    add_dense(r, albert ? "sop_classifier.classifier" : "cls.seq_relationship", "next_sentence", head);
  if (h.sequence_labels > 0) add_dense(r, "classifier", "classifier", head);
  if (h.token_labels > 0) add_dense(r, "classifier", "tagger", head);
  if (h.span) add_dense(r, "qa_outputs", "span", head);
  return r;
}

std::vector<TiedAlias> bert_like_aliases(const HeadsConfig& h, bool albert) {
  std::vector<TiedAlias> a;
  if (!h.masked_lm) return a;
  const std::string mlm = albert ? "predictions." : "cls.predictions.";
  if (h.tie_lm) a.push_back({mlm + "decoder.weight", "@embeddings.word_embeddings.weight"});
  a.push_back({mlm + "decoder.bias", mlm + "bias"});
  return a;
}

void bert_like_detect_heads(const CheckpointContents& contents, const json& cj,
                            TransformerConfig& c, HeadsConfig& h, bool albert) {
  const std::string mlm = albert ? "predictions." : "cls.predictions.";
  c.pooler = contents.has(contents.base(albert ? "pooler.weight" : "pooler.dense.weight"));
  c.type_vocab_size =
      contents.has(contents.base("embeddings.token_type_embeddings.weight")) ? c.type_vocab_size : 0;
  h.masked_lm = contents.has_any_with_prefix(mlm);
  const std::string words = contents.base("embeddings.word_embeddings.weight");
  if (h.masked_lm && contents.has(mlm + "decoder.weight") && contents.has(words))
    h.tie_lm = contents.same_values(mlm + "decoder.weight", words);
  const std::string nsp = albert ? "sop_classifier.classifier.weight" : "cls.seq_relationship.weight";
  if (contents.has(nsp)) h.next_sentence = contents.rows(nsp);
  if (contents.has("classifier.weight")) {
    if (architecture_contains(cj, "TokenClassification")) h.token_labels = contents.rows("classifier.weight");
    else h.sequence_labels = contents.rows("classifier.weight");
  }
  h.span = contents.has("qa_outputs.weight");
  if (value_or<double>(cj, "classifier_dropout", -1.0) >= 0)
    h.classifier_dropout = value<double>(cj, "classifier_dropout");
}

}  // namespace attnkit::io::detail
