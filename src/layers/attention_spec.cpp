#include "attnkit/layers/attention_spec.h"

namespace attnkit::layers {

bool AttentionSpec::uses_logits() const { return produces_logits(kind); }

AttentionVariant AttentionSpec::variant() const {
  AttentionVariant v;
  v.kind = kind == AttentionKind::Softmax && talking_heads ? AttentionKind::TalkingHeads : kind;
  if (kind == AttentionKind::Linear) v.feature_map = feature_map;
  if (kind == AttentionKind::Mixture) v.mixture = mixture;
  return v;
}

AttentionSpec AttentionSpec::parse(std::string_view text) {
  const AttentionVariant v = parse_attention_kind(text);
  AttentionSpec spec;
  // Talking-heads is softmax with head mixing; the layer keeps it as a switch that works with
  // every logit kind.
  spec.kind = v.kind == AttentionKind::TalkingHeads ? AttentionKind::Softmax : v.kind;
  spec.talking_heads = v.kind == AttentionKind::TalkingHeads;
  spec.feature_map = v.feature_map;
  spec.mixture = v.mixture;
  return spec;
}

std::string AttentionSpec::to_string() const { return attnkit::to_string(variant()); }

}  // namespace attnkit::layers
