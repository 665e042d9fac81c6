#include "attnkit/layers/attention_spec.h"

#include "attnkit/error.h"

#include <fmt/format.h>

#include <array>
#include <utility>

namespace attnkit::layers {
namespace {

constexpr std::array<std::pair<AttentionKind, const char*>, 8> kKindNames{{
    {AttentionKind::Softmax, "softmax"},
    {AttentionKind::Linear, "linear"},
    {AttentionKind::Cosformer, "cosformer"},
    {AttentionKind::SynthesizerDense, "synthesizer-dense"},
    {AttentionKind::SynthesizerRandom, "synthesizer-random"},
    {AttentionKind::SynthesizerFactorizedDense, "synthesizer-factorized-dense"},
    {AttentionKind::SynthesizerFactorizedRandom, "synthesizer-factorized-random"},
    {AttentionKind::Mixture, "mixture"},
}};

bool produces_logits(AttentionKind kind) {
  return kind != AttentionKind::Linear && kind != AttentionKind::Cosformer;
}

}  // namespace

const char* attention_kind_name(AttentionKind kind) {
  for (const auto& [k, name] : kKindNames)
    if (k == kind) return name;
  return "?";
}

std::vector<std::string> attention_kind_names() {
  std::vector<std::string> names;
  for (const auto& entry : kKindNames) names.emplace_back(entry.second);
  return names;
}

AttentionKind parse_attention_kind(const std::string& name) {
  for (const auto& [kind, known] : kKindNames)
    if (name == known) return kind;
  throw Error(fmt::format("unknown attention kind '{}' (known: {})", name,
                          fmt::join(attention_kind_names(), ", ")));
}

bool AttentionSpec::uses_logits() const { return produces_logits(kind); }

AttentionSpec AttentionSpec::parse(const std::string& text) {
  AttentionSpec spec;
  const auto colon = text.find(':');
  spec.kind = parse_attention_kind(text.substr(0, colon));
  const std::string rest = colon == std::string::npos ? "" : text.substr(colon + 1);
  switch (spec.kind) {
    case AttentionKind::Linear:
      if (!rest.empty()) spec.feature_map = rest;
      break;
    case AttentionKind::Mixture: {
      if (rest.empty())
        throw Error(fmt::format("attention '{}': a mixture needs components, e.g. "
                                "mixture:synthesizer-random+softmax",
                                text));
      size_t start = 0;
      while (start <= rest.size()) {
        const auto plus = rest.find('+', start);
        const std::string part = rest.substr(start, plus == std::string::npos ? plus : plus - start);
        const AttentionKind component = parse_attention_kind(part);
        if (!produces_logits(component) || component == AttentionKind::Mixture)
          throw Error(fmt::format("attention '{}': '{}' cannot be mixed (mixtures combine the "
                                  "logits of softmax and synthesizer kinds)",
                                  text, part));
        spec.mixture.push_back(component);
        if (plus == std::string::npos) break;
        start = plus + 1;
      }
      if (spec.mixture.size() < 2)
        throw Error(fmt::format("attention '{}': a mixture needs at least two components", text));
      break;
    }
    default:
      if (!rest.empty())
        throw Error(fmt::format("attention '{}': kind '{}' takes no options", text,
                                attention_kind_name(spec.kind)));
  }
  return spec;
}

std::string AttentionSpec::to_string() const {
  std::string text = attention_kind_name(kind);
  if (kind == AttentionKind::Linear) {
    text += ":" + feature_map;
  } else if (kind == AttentionKind::Mixture) {
    for (size_t i = 0; i < mixture.size(); ++i)
      text += (i == 0 ? ":" : "+") + std::string(attention_kind_name(mixture[i]));
  }
  return text;
}

}  // namespace attnkit::layers
