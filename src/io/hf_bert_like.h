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
  return HuggingFaceFamily{
      Albert ? "albert" : "bert",
      Albert ? models::ModelFamily::Albert : models::ModelFamily::Bert,
      {Albert ? "Albert" : "Bert"},
      Albert ? "albert." : "bert.",
      [](const nlohmann::json& j) { return bert_like_config_from_json(j, Albert); },
      [](const models::TransformerConfig& c, const models::HeadsConfig& h) {
        return bert_like_config_to_json(c, h, Albert);
      },
      [](const models::TransformerConfig& c, const models::HeadsConfig& h) {
        return bert_like_rules(c, h, Albert);
      },
      [](const models::HeadsConfig& h) { return bert_like_aliases(h, Albert); },
      kBertLikeBuffers,
      [](const CheckpointContents& contents, const nlohmann::json& j, models::TransformerConfig& c,
         models::HeadsConfig& h) { bert_like_detect_heads(contents, j, c, h, Albert); },
      nullptr,
  };
}

}  // namespace attnkit::io::detail
