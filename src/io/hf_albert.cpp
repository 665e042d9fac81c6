// Hugging Face ALBERT (model_type "albert"; AlbertModel, AlbertForPreTraining, AlbertFor*): the
// family's record. Its rules are shared with BERT (hf_bert_like.cpp).
#include "hf_bert_like.h"

namespace attnkit::io::detail {

const HuggingFaceFamily& albert_family() {
  static const HuggingFaceFamily family{
      "albert",
      models::ModelFamily::Albert,
      {"Albert"},
      "albert.",
      [](const nlohmann::json& j) { return bert_like_config_from_json(j, true); },
      [](const models::TransformerConfig& c, const models::HeadsConfig& h) {
        return bert_like_config_to_json(c, h, true);
      },
      [](const models::TransformerConfig& c, const models::HeadsConfig& h) {
        return bert_like_rules(c, h, true);
      },
      [](const models::HeadsConfig& h) { return bert_like_aliases(h, true); },
      kBertLikeBuffers,
      [](const CheckpointContents& contents, const nlohmann::json& j, models::TransformerConfig& c,
         models::HeadsConfig& h) { bert_like_detect_heads(contents, j, c, h, true); },
  };
  return family;
}

}  // namespace attnkit::io::detail
