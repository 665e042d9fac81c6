// Hugging Face BERT (model_type "bert"; BertModel, BertForPreTraining, BertFor*): the
// family's record. Its functions are shared with ALBERT (hf_bert_like.cpp).
#include "hf_bert_like.h"

namespace attnkit::io::detail {

const HuggingFaceFamily& bert_family() {
  static const HuggingFaceFamily family = bert_like_family<false>();
  return family;
}

}  // namespace attnkit::io::detail
