// The attention-kind grammar (attention_kind.h) without LibTorch: every canonical spelling
// round-trips, aliases map to their canonical kind, and bad text is a one-line error that lists
// what is accepted.
#include "attnkit/attention_kind.h"
#include "attnkit/error.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace attnkit {
namespace {

std::string error_of(const std::string& text) {
  try {
    parse_attention_kind(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(AttentionKindGrammar, CanonicalSpellingsRoundTrip) {
  for (const std::string text :
       {"softmax", "talking-heads", "linear:elu", "linear:relu", "linear:favor",
        "linear:favor:64:7", "linear:favor:0:3", "linear:favor:16:0", "linear:t2r",
        "linear:t2r:32", "linear:hedgehog", "linear:hedgehog:8", "cosformer",
        "synthesizer-dense", "synthesizer-random", "synthesizer-random-fixed",
        "synthesizer-factorized-dense", "synthesizer-factorized-random",
        "mixture:synthesizer-random+softmax", "mixture:softmax+synthesizer-dense+synthesizer-random-fixed"}) {
    const auto variant = parse_attention_kind(text);
    EXPECT_EQ(to_string(variant), text);
    EXPECT_EQ(parse_attention_kind(to_string(variant)), variant) << text;
  }
}

TEST(AttentionKindGrammar, FieldsOfParsedKinds) {
  const auto favor = parse_attention_kind("linear:favor:64:7");
  EXPECT_EQ(favor.kind, AttentionKind::Linear);
  EXPECT_EQ(favor.feature_map.kind, FeatureMapKind::Favor);
  EXPECT_EQ(favor.feature_map.num_features, 64);
  EXPECT_EQ(favor.feature_map.seed, 7u);
  // favor:M alone: seed 0, written out in full.
  const auto m_only = parse_attention_kind("linear:favor:32");
  EXPECT_EQ(m_only.feature_map.num_features, 32);
  EXPECT_EQ(m_only.feature_map.seed, 0u);
  EXPECT_EQ(to_string(m_only), "linear:favor:32:0");
  const auto fixed = parse_attention_kind("synthesizer-random-fixed");
  EXPECT_EQ(fixed.kind, AttentionKind::SynthesizerRandomFixed);
  const auto mix = parse_attention_kind("mixture:synthesizer-factorized-random+softmax");
  ASSERT_EQ(mix.mixture.size(), 2u);
  EXPECT_EQ(mix.mixture[0], AttentionKind::SynthesizerFactorizedRandom);
  EXPECT_EQ(mix.mixture[1], AttentionKind::Softmax);
  EXPECT_TRUE(parse_attention_kind("softmax").mixture.empty());
  // The largest seed a uint64 holds.
  EXPECT_EQ(parse_attention_kind("linear:favor:8:18446744073709551615").feature_map.seed,
            18446744073709551615ull);
}

TEST(AttentionKindGrammar, OldCatalogueNamesAreAliases) {
  EXPECT_EQ(to_string(parse_attention_kind("linear")), "linear:elu");
  EXPECT_EQ(to_string(parse_attention_kind("linear-relu")), "linear:relu");
  EXPECT_EQ(to_string(parse_attention_kind("favor")), "linear:favor");
  EXPECT_EQ(to_string(parse_attention_kind("synthesizer-mixture")),
            "mixture:synthesizer-random+softmax");
  EXPECT_EQ(parse_attention_kind("linear"), parse_attention_kind("linear:elu"));
}

TEST(AttentionKindGrammar, BadTextIsAOneLineErrorListingTheAccepted) {
  for (const std::string text :
       {"", "sparse", "Softmax", " softmax", "softmax ", "linear:", "linear:tanh", "linear:favor:",
        "linear:favor:-1", "linear:favor:+4", "linear:favor:4:", "linear:favor:4:5:6",
        "linear:favor:x", "linear:favor:99999999999999999999", "favor:8:1", "linear-elu",
        "cosformer:2", "softmax:relu", "synthesizer-random:3", "mixture", "mixture:",
        "mixture:softmax", "mixture:linear+softmax", "mixture:softmax+cosformer",
        "mixture:softmax+talking-heads", "mixture:softmax++synthesizer-dense",
        "mixture:softmax+mixture", "synthesizer:dense", "linear:t2r:", "linear:t2r:-2",
        "linear:t2r:4:5", "linear:t2rx", "linear:hedgehog:x", "t2r", "mixture:softmax+linear:t2r"}) {
    const std::string message = error_of(text);
    ASSERT_FALSE(message.empty()) << "'" << text << "' parsed";
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_NE(message.find("'" + text + "'"), std::string::npos) << message;
  }
  // An unknown kind lists every accepted spelling and the aliases.
  const std::string message = error_of("sparse");
  EXPECT_NE(message.find("unknown attention kind 'sparse'"), std::string::npos);
  for (const char* spelling : {"softmax", "talking-heads", "linear:elu", "linear:relu",
                               "linear:favor[:M[:SEED]]", "cosformer", "synthesizer-random-fixed",
                               "mixture:A+B", "linear-relu = linear:relu"})
    EXPECT_NE(message.find(spelling), std::string::npos) << spelling << " missing in: " << message;
}

TEST(AttentionKindGrammar, FeatureMapsAlone) {
  EXPECT_EQ(parse_feature_map("relu").kind, FeatureMapKind::Relu);
  EXPECT_EQ(parse_feature_map("favor:256:0"), (FeatureMapSpec{FeatureMapKind::Favor, 256, 0}));
  EXPECT_EQ(to_string(FeatureMapSpec{FeatureMapKind::Favor, 256, 0}), "favor:256:0");
  EXPECT_EQ(to_string(FeatureMapSpec{FeatureMapKind::CosRelu, 0, 0}), "cos-relu");
  EXPECT_THROW(parse_feature_map("cos-relu"), Error);  // cosFormer's map has its own kind
  EXPECT_THROW(parse_feature_map("linear:elu"), Error);
  EXPECT_THROW(parse_feature_map("softplus"), Error);
  EXPECT_EQ(parse_feature_map("t2r:16"), (FeatureMapSpec{FeatureMapKind::T2r, 16, 0}));
  EXPECT_EQ(parse_feature_map("hedgehog"), (FeatureMapSpec{FeatureMapKind::Hedgehog, 0, 0}));
  // M = 0 is the default, written without it.
  EXPECT_EQ(to_string(parse_feature_map("hedgehog:0")), "hedgehog");
  EXPECT_TRUE(is_learned(FeatureMapKind::T2r));
  EXPECT_TRUE(is_learned(FeatureMapKind::Hedgehog));
  for (auto kind : {FeatureMapKind::Elu, FeatureMapKind::Relu, FeatureMapKind::Favor,
                    FeatureMapKind::CosRelu})
    EXPECT_FALSE(is_learned(kind));
}

TEST(AttentionKindGrammar, KindNamesAndLogits) {
  EXPECT_STREQ(attention_kind_name(AttentionKind::SynthesizerRandomFixed), "synthesizer-random-fixed");
  EXPECT_TRUE(produces_logits(AttentionKind::TalkingHeads));
  EXPECT_TRUE(produces_logits(AttentionKind::Mixture));
  EXPECT_FALSE(produces_logits(AttentionKind::Linear));
  EXPECT_FALSE(produces_logits(AttentionKind::Cosformer));
}

}  // namespace
}  // namespace attnkit
