// Hugging Face ALBERT (model_type "albert"; AlbertModel, AlbertForPreTraining, AlbertFor*): the
// family's record. Its functions are shared with BERT (hf_bert_like.cpp).
#include "hf_bert_like.h"

namespace attnkit::io::detail {

const HuggingFaceFamily& albert_family() {
  static const HuggingFaceFamily family = bert_like_family<true>();
  return family;
}

}  // namespace attnkit::io::detail
