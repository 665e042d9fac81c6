// GGUF models (io/gguf_model.h) on tiny llama files written byte by byte: the metadata as
// config.json, the q/k rows llama.cpp's converter permutes put back (the file holds the permuted
// rows of known matrices), the model loaded through load_model, and one-line errors naming the
// file for what a llama file must not be. The real SmolLM2 file against transformers:
// tests/python/test_smollm2_gguf_hf.py.
#include "attnkit/error.h"
#include "attnkit/io/gguf_model.h"
#include "attnkit/io/model_directory.h"
#include "formats/gguf_bytes.h"
#include "support/test_files.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace attnkit {
namespace {

using namespace formats::gguf_bytes;
using formats::GgmlType;
using formats::GgufType;
using testing::error_of;

constexpr int64_t kHidden = 8, kHeads = 2, kKvHeads = 1, kHeadDim = 4, kFfn = 12, kVocab = 10;

// llama.cpp's permute (convert_hf_to_gguf.py): rows [heads, 2, d/2, in] -> [heads, d/2, 2, in].
at::Tensor permuted(const at::Tensor& w, int64_t heads) {
  return w.reshape({heads, 2, w.size(0) / heads / 2, w.size(1)}).transpose(1, 2).reshape(w.sizes()).contiguous();
}

struct TinyLlama {
  std::map<std::string, at::Tensor> hf;  // transformers' names -> values
  std::string arch = "llama";
  std::vector<std::string> drop;         // GGUF tensors left out
  std::vector<std::pair<std::string, at::Tensor>> extra;  // GGUF tensors added
  int64_t layers = 1;

  TinyLlama() {
    torch::manual_seed(7);
    hf["model.embed_tokens.weight"] = torch::randn({kVocab, kHidden});
    hf["model.layers.0.input_layernorm.weight"] = torch::rand({kHidden}) + 0.5;
    hf["model.layers.0.self_attn.q_proj.weight"] = torch::arange(kHeads * kHeadDim * kHidden).reshape({kHeads * kHeadDim, kHidden}).to(at::kFloat) / 64.0;
    hf["model.layers.0.self_attn.k_proj.weight"] = torch::randn({kKvHeads * kHeadDim, kHidden});
    hf["model.layers.0.self_attn.v_proj.weight"] = torch::randn({kKvHeads * kHeadDim, kHidden});
    hf["model.layers.0.self_attn.o_proj.weight"] = torch::randn({kHidden, kHeads * kHeadDim});
    hf["model.layers.0.post_attention_layernorm.weight"] = torch::rand({kHidden}) + 0.5;
    hf["model.layers.0.mlp.gate_proj.weight"] = torch::randn({kFfn, kHidden});
    hf["model.layers.0.mlp.up_proj.weight"] = torch::randn({kFfn, kHidden});
    hf["model.layers.0.mlp.down_proj.weight"] = torch::randn({kHidden, kFfn});
    hf["model.norm.weight"] = torch::rand({kHidden}) + 0.5;
  }

  std::string bytes() const {
    const std::vector<std::pair<std::string, std::string>> names = {
        {"token_embd.weight", "model.embed_tokens.weight"},
        {"blk.0.attn_norm.weight", "model.layers.0.input_layernorm.weight"},
        {"blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight"},
        {"blk.0.attn_k.weight", "model.layers.0.self_attn.k_proj.weight"},
        {"blk.0.attn_v.weight", "model.layers.0.self_attn.v_proj.weight"},
        {"blk.0.attn_output.weight", "model.layers.0.self_attn.o_proj.weight"},
        {"blk.0.ffn_norm.weight", "model.layers.0.post_attention_layernorm.weight"},
        {"blk.0.ffn_gate.weight", "model.layers.0.mlp.gate_proj.weight"},
        {"blk.0.ffn_up.weight", "model.layers.0.mlp.up_proj.weight"},
        {"blk.0.ffn_down.weight", "model.layers.0.mlp.down_proj.weight"},
        {"output_norm.weight", "model.norm.weight"}};
    FileParts parts;
    auto u32kv = [&](const std::string& key, uint32_t v) {
      parts.metadata.push_back(kv(key, GgufType::UINT32, u32(v)));
    };
    parts.metadata.push_back(kv("general.architecture", GgufType::STRING, str(arch)));
    u32kv(arch + ".block_count", static_cast<uint32_t>(layers));
    u32kv(arch + ".context_length", 64);
    u32kv(arch + ".embedding_length", kHidden);
    u32kv(arch + ".feed_forward_length", kFfn);
    u32kv(arch + ".attention.head_count", kHeads);
    u32kv(arch + ".attention.head_count_kv", kKvHeads);
    parts.metadata.push_back(kv(arch + ".rope.freq_base", GgufType::FLOAT32, le(1000.0f)));
    parts.metadata.push_back(kv(arch + ".attention.layer_norm_rms_epsilon", GgufType::FLOAT32, le(1e-5f)));
    u32kv("tokenizer.ggml.eos_token_id", 2);
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (const auto& [gguf_name, hf_name] : names) {
      if (std::find(drop.begin(), drop.end(), gguf_name) != drop.end()) continue;
      at::Tensor t = hf.at(hf_name);
      if (gguf_name == "blk.0.attn_q.weight") t = permuted(t, kHeads);
      if (gguf_name == "blk.0.attn_k.weight") t = permuted(t, kKvHeads);
      tensors.emplace_back(gguf_name, t);
    }
    tensors.insert(tensors.end(), extra.begin(), extra.end());
    for (const auto& [name, t] : tensors) {
      std::vector<uint64_t> dims;  // ggml order: the row first
      for (int64_t d = t.dim() - 1; d >= 0; --d) dims.push_back(static_cast<uint64_t>(t.size(d)));
      parts.tensors.push_back(tensor_info(name, dims, GgmlType::F32, parts.data.size()));
      const at::Tensor c = t.contiguous();
      parts.data += floats(std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel()));
      parts.data.resize((parts.data.size() + 31) / 32 * 32, '\0');
    }
    return gguf(parts);
  }

  std::string write(const std::string& name) const {
    return testing::write_bytes(testing::scratch_directory("gguf_model") / name, bytes());
  }
};

TEST(GgufModel, MetadataTensorsAndUnpermutedRows) {
  const TinyLlama tiny;
  const std::string path = tiny.write("tiny.gguf");
  EXPECT_TRUE(io::is_gguf_file(path));
  const io::GgufCheckpoint c = io::read_gguf_checkpoint(path);
  EXPECT_EQ(c.config["model_type"], "llama");
  EXPECT_EQ(c.config["num_attention_heads"], kHeads);
  EXPECT_EQ(c.config["num_key_value_heads"], kKvHeads);
  EXPECT_EQ(c.config["head_dim"], kHeadDim);
  EXPECT_EQ(c.config["rope_theta"], 1000.0);
  EXPECT_EQ(c.config["tie_word_embeddings"], true);
  EXPECT_EQ(c.config["eos_token_id"], 2);
  ASSERT_EQ(c.tensors.size(), tiny.hf.size());
  for (const auto& [name, t] : tiny.hf) {
    ASSERT_TRUE(c.tensors.count(name)) << name;
    EXPECT_TRUE(c.tensors.at(name).equal(t)) << name;  // q and k un-permuted exactly
  }
}

TEST(GgufModel, LoadsAsTheHuggingFaceLlamaItDescribes) {
  const std::string path = TinyLlama().write("load.gguf");
  io::LoadedModel loaded = io::load_model(path);
  EXPECT_EQ(loaded.format, "huggingface");
  EXPECT_EQ(loaded.config.family.name(), std::string("llama"));
  EXPECT_EQ(loaded.config.attention.kv_heads, kKvHeads);
  EXPECT_TRUE(loaded.heads.causal_lm);
  EXPECT_TRUE(loaded.heads.tie_lm);
  torch::NoGradGuard no_grad;
  models::TaskInputs in;
  in.input_ids = torch::tensor({{1, 4, 7, 3}}, at::kLong);
  const at::Tensor logits = loaded.task->forward(in).causal_lm_logits;
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{1, 4, kVocab}));
  EXPECT_TRUE(logits.isfinite().all().item<bool>());
}

TEST(GgufModel, BadFilesAreOneLineErrorsNamingTheFile) {
  auto expect = [](const TinyLlama& tiny, const std::string& name, const std::string& part) {
    const std::string path = tiny.write(name);
    const std::string message = error_of([&] { io::load_model(path); });
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find(part), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  };
  TinyLlama other;
  other.arch = "gpt2";
  expect(other, "arch.gguf", "architecture 'gpt2' is not supported");
  TinyLlama missing;
  missing.drop = {"blk.0.ffn_up.weight"};
  expect(missing, "missing.gguf", "model.layers.0.mlp.up_proj.weight");
  TinyLlama unknown;
  unknown.extra = {{"blk.0.attn_mystery.weight", torch::zeros({2, 2})}};
  expect(unknown, "unknown.gguf", "unknown tensor 'blk.0.attn_mystery.weight'");
  TinyLlama beyond;
  beyond.extra = {{"blk.3.attn_norm.weight", torch::ones({kHidden})}};
  expect(beyond, "beyond.gguf", "beyond the 1 blocks");
  TinyLlama shape;
  shape.hf["model.layers.0.mlp.down_proj.weight"] = torch::randn({kHidden, kFfn + 1});
  expect(shape, "shape.gguf", "shape mismatch");
  TinyLlama rows;  // q rows that are not 2 x heads x something
  rows.hf["model.layers.0.self_attn.q_proj.weight"] = torch::randn({kHeads * kHeadDim, kHidden});
  rows.extra = {{"rope_freqs.weight", torch::ones({2})}};
  expect(rows, "rope_freqs.gguf", "rope_freqs.weight");
}

// The fuzz target's seeds load; the hostile files of fuzz/regressions/gguf_model (huge or zero
// sizes, a NaN or negative eps, heads that do not divide, missing tensors) are one-line errors
// naming the file, each before any allocation of the size it names.
TEST(GgufModel, FuzzSeedsLoadAndRegressionsAreOneLineErrors) {
  namespace fs = std::filesystem;
  const fs::path fuzz = fs::path(ATTNKIT_SOURCE_DIR) / "fuzz";
  int seeds = 0, hostile = 0;
  for (const auto& entry : fs::directory_iterator(fuzz / "corpus" / "gguf_model")) {
    const auto loaded = io::load_model(entry.path().string());
    ASSERT_TRUE(loaded.transformer) << entry.path();
    ++seeds;
  }
  for (const auto& entry : fs::directory_iterator(fuzz / "regressions" / "gguf_model")) {
    const std::string path = entry.path().string();
    const std::string message = error_of([&] { io::load_model(path); });
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    ++hostile;
  }
  EXPECT_GE(seeds, 3);
  EXPECT_GE(hostile, 10);
}

}  // namespace
}  // namespace attnkit
