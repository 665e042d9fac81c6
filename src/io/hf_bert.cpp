// Hugging Face BERT (model_type "bert"; BertModel, BertForPreTraining, BertFor*): the family's
// record. Its rules are shared with ALBERT (hf_bert_like.cpp).
#include "hf_bert_like.h"

namespace attnkit::io::detail {

const HuggingFaceFamily& bert_family() {
  static const HuggingFaceFamily family{
      "bert",
      models::ModelFamily::Bert,
      {"Bert"},
      "bert.",
      [](const nlohmann::json& j) { return bert_like_config_from_json(j, false); },
      [](const models::TransformerConfig& c, const models::HeadsConfig& h) {
        return bert_like_config_to_json(c, h, false);
      },
      [](const models::TransformerConfig& c, const models::HeadsConfig& h) {
        return bert_like_rules(c, h, false);
      },
      [](const models::HeadsConfig& h) { return bert_like_aliases(h, false); },
      kBertLikeBuffers,
      [](const CheckpointContents& contents, const nlohmann::json& j, models::TransformerConfig& c,
         models::HeadsConfig& h) { bert_like_detect_heads(contents, j, c, h, false); },
  };
  return family;
}

}  // namespace attnkit::io::detail
