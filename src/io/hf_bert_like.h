#pragma once
// What BERT and ALBERT share (hf_bert.cpp, hf_albert.cpp): most of config.json, the embeddings'
// and heads' names, tied aliases, buffers, head detection and the record itself. `albert` picks ALBERT's variants
// (layer groups, factorised embeddings, "predictions." / "sop_classifier." heads).
#include "hf_family.h"

namespace attnkit::io::detail {

models::TransformerConfig bert_like_config_from_json(const nlohmann::json& config_json, bool albert);
nlohmann::json bert_like_config_to_json(const models::TransformerConfig& config,
                                        const models::HeadsConfig& heads, bool albert);
std::vector<NameRule> bert_like_rules(const models::TransformerConfig& config,
                                      const models::HeadsConfig& heads, bool albert);
std::vector<TiedAlias> bert_like_aliases(const models::HeadsConfig& heads, bool albert);
void bert_like_detect_heads(const CheckpointContents& contents, const nlohmann::json& config_json,
                            models::TransformerConfig& config, models::HeadsConfig& heads,
                            bool albert);
// position_ids / token_type_ids buffers under embeddings.
inline constexpr const char* kBertLikeBuffers = R"(^embeddings\.(position_ids|token_type_ids)$)";

// The record of BERT (Albert = false) or ALBERT (true): the functions above with the flag bound.
template <bool Albert>
HuggingFaceFamily bert_like_family() {
  HuggingFaceFamily family{
      Albert ? "albert" : "bert",
      {Albert ? "Albert" : "Bert"},
      Albert ? "albert." : "bert.",
      {Stack::Encoder, Stack::Heads},
      HeadPruning::InConfig,
      [](const nlohmann::json& j) { return HuggingFaceConfig{bert_like_config_from_json(j, Albert)}; },
      [](const HuggingFaceConfig& c) { return bert_like_config_to_json(c.stack, c.heads, Albert); },
      [](const HuggingFaceConfig& c) { return bert_like_rules(c.stack, c.heads, Albert); },
      [](const HuggingFaceConfig& c) { return bert_like_aliases(c.heads, Albert); },
      kBertLikeBuffers,
      [](const CheckpointContents& contents, const nlohmann::json& j, HuggingFaceConfig& c) {
        bert_like_detect_heads(contents, j, c.stack, c.heads, Albert);
      },
  };
  if (Albert) family.next_sentence_output = "sop_logits";  // AlbertForPreTraining's name
  return family;
}

}  // namespace attnkit::io::detail
