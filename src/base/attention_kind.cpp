#include "attnkit/attention_kind.h"

#include "attnkit/error.h"
#include "attnkit/parse.h"

#include <fmt/format.h>

#include <array>
#include <limits>
#include <utility>

namespace attnkit {
namespace {

constexpr std::array<std::pair<AttentionKind, const char*>, 10> kKindNames{{
    {AttentionKind::Softmax, "softmax"},
    {AttentionKind::TalkingHeads, "talking-heads"},
    {AttentionKind::Linear, "linear"},
    {AttentionKind::Cosformer, "cosformer"},
    {AttentionKind::SynthesizerDense, "synthesizer-dense"},
    {AttentionKind::SynthesizerRandom, "synthesizer-random"},
    {AttentionKind::SynthesizerRandomFixed, "synthesizer-random-fixed"},
    {AttentionKind::SynthesizerFactorizedDense, "synthesizer-factorized-dense"},
    {AttentionKind::SynthesizerFactorizedRandom, "synthesizer-factorized-random"},
    {AttentionKind::Mixture, "mixture"},
}};

constexpr const char* kAliases =
    "aliases: linear = linear:elu, linear-relu = linear:relu, favor = linear:favor, "
    "synthesizer-mixture = mixture:synthesizer-random+softmax";

constexpr const char* kFeatureMaps =
    "elu, relu, favor, favor:M, favor:M:SEED, t2r, t2r:M, hedgehog or hedgehog:M";

// Mixture components: the kinds whose logits stand alone (talking-heads mixes heads of a softmax,
// a mixture of mixtures says nothing new).
bool mixable(AttentionKind kind) {
  return produces_logits(kind) && kind != AttentionKind::TalkingHeads &&
         kind != AttentionKind::Mixture;
}

[[noreturn]] void unknown_kind(std::string_view text) {
  throw Error(fmt::format("unknown attention kind '{}'; accepted: {}", text,
                          accepted_attention_kinds()));
}

// A plain decimal number (no sign, no spaces; parse.h) that fits T.
template <typename T>
bool parse_number(std::string_view text, T& out) {
  const std::optional<uint64_t> value = try_parse_unsigned(text);
  if (!value || *value > static_cast<uint64_t>(std::numeric_limits<T>::max())) return false;
  out = static_cast<T>(*value);
  return true;
}

AttentionKind kind_named(std::string_view name, std::string_view whole) {
  for (const auto& [kind, known] : kKindNames)
    if (name == known) return kind;
  unknown_kind(whole);
}

}  // namespace

bool is_learned(FeatureMapKind kind) {
  return kind == FeatureMapKind::T2r || kind == FeatureMapKind::Hedgehog;
}

bool operator==(const FeatureMapSpec& a, const FeatureMapSpec& b) {
  return a.kind == b.kind && a.num_features == b.num_features && a.seed == b.seed;
}

bool operator==(const AttentionVariant& a, const AttentionVariant& b) {
  return a.kind == b.kind && a.feature_map == b.feature_map && a.mixture == b.mixture;
}

const char* attention_kind_name(AttentionKind kind) {
  for (const auto& [k, name] : kKindNames)
    if (k == kind) return name;
  return "?";
}

bool produces_logits(AttentionKind kind) {
  return kind != AttentionKind::Linear && kind != AttentionKind::Cosformer;
}

std::string accepted_attention_kinds() {
  return fmt::format(
      "softmax, talking-heads, linear:elu, linear:relu, linear:favor[:M[:SEED]], linear:t2r[:M], "
      "linear:hedgehog[:M], cosformer, "
      "synthesizer-dense, synthesizer-random, synthesizer-random-fixed, "
      "synthesizer-factorized-dense, synthesizer-factorized-random, mixture:A+B[+...] (A, B: "
      "softmax or synthesizer kinds); {}",
      kAliases);
}

FeatureMapSpec parse_feature_map(std::string_view text) {
  FeatureMapSpec spec;
  if (text == "elu") return spec;
  if (text == "relu") {
    spec.kind = FeatureMapKind::Relu;
    return spec;
  }
  const std::string_view favor = "favor";
  if (text.substr(0, favor.size()) == favor) {
    spec.kind = FeatureMapKind::Favor;
    std::string_view rest = text.substr(favor.size());
    if (rest.empty()) return spec;
    if (rest[0] == ':') {
      rest.remove_prefix(1);
      const auto colon = rest.find(':');
      const std::string_view m = rest.substr(0, colon);
      const std::string_view seed = colon == std::string_view::npos ? "0" : rest.substr(colon + 1);
      if (parse_number(m, spec.num_features) && parse_number(seed, spec.seed)) return spec;
      throw Error(fmt::format("feature map '{}': M and SEED must be non-negative integers "
                              "(favor:M or favor:M:SEED; M = 0 picks d·ceil(ln d))",
                              text));
    }
  }
  for (const auto& [kind, name] : {std::pair<FeatureMapKind, std::string_view>{FeatureMapKind::T2r, "t2r"},
                                   {FeatureMapKind::Hedgehog, "hedgehog"}}) {
    if (text.substr(0, name.size()) != name) continue;
    const std::string_view rest = text.substr(name.size());
    spec.kind = kind;
    if (rest.empty()) return spec;
    if (rest[0] == ':' && parse_number(rest.substr(1), spec.num_features)) return spec;
    if (rest[0] == ':')
      throw Error(fmt::format("feature map '{}': M must be a non-negative integer ({}:M; M = 0 "
                              "picks d)",
                              text, name));
  }
  throw Error(fmt::format("unknown feature map '{}'; expected {}", text, kFeatureMaps));
}

std::string to_string(const FeatureMapSpec& feature_map) {
  switch (feature_map.kind) {
    case FeatureMapKind::Elu: return "elu";
    case FeatureMapKind::Relu: return "relu";
    case FeatureMapKind::Favor:
      if (feature_map.num_features == 0 && feature_map.seed == 0) return "favor";
      return fmt::format("favor:{}:{}", feature_map.num_features, feature_map.seed);
    case FeatureMapKind::CosRelu: return "cos-relu";
    case FeatureMapKind::T2r:
    case FeatureMapKind::Hedgehog: {
      const char* name = feature_map.kind == FeatureMapKind::T2r ? "t2r" : "hedgehog";
      if (feature_map.num_features == 0) return name;
      return fmt::format("{}:{}", name, feature_map.num_features);
    }
  }
  return "?";
}

AttentionVariant parse_attention_kind(std::string_view text) {
  AttentionVariant variant;
  // The aliases of the old catalogue names first (they contain no ':').
  if (text == "linear") {
    variant.kind = AttentionKind::Linear;
    return variant;
  }
  if (text == "linear-relu" || text == "favor") {
    variant.kind = AttentionKind::Linear;
    variant.feature_map.kind = text == "favor" ? FeatureMapKind::Favor : FeatureMapKind::Relu;
    return variant;
  }
  if (text == "synthesizer-mixture") {
    variant.kind = AttentionKind::Mixture;
    variant.mixture = {AttentionKind::SynthesizerRandom, AttentionKind::Softmax};
    return variant;
  }
  const auto colon = text.find(':');
  variant.kind = kind_named(text.substr(0, colon), text);
  const bool has_rest = colon != std::string_view::npos;
  const std::string_view rest = has_rest ? text.substr(colon + 1) : std::string_view();
  switch (variant.kind) {
    case AttentionKind::Linear:
      // "linear:" alone is as wrong as any other unknown feature map.
      try {
        variant.feature_map = parse_feature_map(rest);
      } catch (const Error& e) {
        throw Error(fmt::format("attention kind '{}': {}", text, e.what()));
      }
      return variant;
    case AttentionKind::Mixture: {
      if (rest.empty())
        throw Error(fmt::format("attention kind '{}': a mixture names its components, e.g. "
                                "mixture:synthesizer-random+softmax",
                                text));
      size_t start = 0;
      while (true) {
        const auto plus = rest.find('+', start);
        const std::string_view part = rest.substr(start, plus == std::string_view::npos
                                                              ? std::string_view::npos
                                                              : plus - start);
        AttentionKind component = AttentionKind::Softmax;
        bool known = false;
        for (const auto& [kind, name] : kKindNames)
          if (part == name) {
            component = kind;
            known = true;
          }
        if (!known || !mixable(component))
          throw Error(fmt::format("attention kind '{}': '{}' cannot be mixed (a mixture combines "
                                  "the logits of softmax and synthesizer kinds)",
                                  text, part));
        variant.mixture.push_back(component);
        if (plus == std::string_view::npos) break;
        start = plus + 1;
      }
      if (variant.mixture.size() < 2)
        throw Error(fmt::format("attention kind '{}': a mixture needs at least two components",
                                text));
      return variant;
    }
    default:
      if (has_rest)
        throw Error(fmt::format("attention kind '{}': '{}' takes no options; accepted: {}", text,
                                attention_kind_name(variant.kind), accepted_attention_kinds()));
      return variant;
  }
}

std::string to_string(const AttentionVariant& variant) {
  std::string text = attention_kind_name(variant.kind);
  if (variant.kind == AttentionKind::Linear) {
    text += ":" + to_string(variant.feature_map);
  } else if (variant.kind == AttentionKind::Mixture) {
    for (size_t i = 0; i < variant.mixture.size(); ++i)
      text += (i == 0 ? ":" : "+") + std::string(attention_kind_name(variant.mixture[i]));
  }
  return text;
}

}  // namespace attnkit
