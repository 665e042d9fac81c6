#include "attnkit/io/gguf_model.h"

#include "attnkit/error.h"
#include "attnkit/formats/gguf.h"
#include "attnkit/formats/gguf_tokenizer.h"
#include "attnkit/text/pretrained.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>

namespace attnkit::io {
namespace {

namespace fs = std::filesystem;
using formats::GgufFile;
using nlohmann::json;

int64_t positive(const GgufFile& file, const std::string& key) {
  const int64_t v = file.get_integer(key);
  if (v <= 0) throw Error(fmt::format("{}: metadata key '{}' must be positive, got {}", file.path(), key, v));
  return v;
}

// The key's value, which must be positive, or `fallback` when the file lacks it.
int64_t positive_or(const GgufFile& file, const std::string& key, int64_t fallback) {
  return file.find(key) ? positive(file, key) : fallback;
}

// llama.cpp's converter stores q (n_head) and k (n_head_kv) with each head's rows reordered from
// the half-split rotary pairs (c, c + d/2) of transformers to interleaved pairs (2c, 2c + 1):
// rows reshaped [heads, 2, d/2, in] -> [heads, d/2, 2, in]. This is the inverse.
at::Tensor unpermute_rows(const at::Tensor& w, int64_t heads, const std::string& name,
                          const std::string& path) {
  const int64_t rows = w.size(0);
  if (heads <= 0 || rows % (2 * heads) != 0)
    throw Error(fmt::format("{}: tensor '{}' has {} rows, not a multiple of 2 x {} heads", path,
                            name, rows, heads));
  return w.reshape({heads, rows / heads / 2, 2, w.size(1)}).transpose(1, 2).reshape(w.sizes()).contiguous();
}

// llama.rope.scaling.* -> rope_scaling (linear and yarn; none otherwise).
json rope_scaling(const GgufFile& file, const std::string& arch) {
  const auto* type = file.find(arch + ".rope.scaling.type");
  if (!type) return nullptr;
  const std::string kind(file.get_string(arch + ".rope.scaling.type"));
  if (kind == "none") return nullptr;
  const double factor = file.get_number(arch + ".rope.scaling.factor");
  if (kind == "linear") return {{"type", "linear"}, {"factor", factor}};
  if (kind == "yarn")
    return {{"rope_type", "yarn"},
            {"factor", factor},
            {"original_max_position_embeddings",
             file.get_integer(arch + ".rope.scaling.original_context_length")}};
  throw Error(fmt::format("{}: rope scaling '{}' is not supported (none, linear, yarn)", file.path(),
                          one_line(kind)));
}

}  // namespace

bool is_gguf_file(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

GgufCheckpoint read_gguf_checkpoint(const std::string& path) {
  const GgufFile file = GgufFile::open(path);
  const std::string arch(file.get_string("general.architecture"));
  if (arch != "llama" && arch != "gemma3")
    throw Error(fmt::format("{}: architecture '{}' is not supported (attnkit reads llama GGUF "
                            "files -- Llama, SmolLM, TinyLlama, Mistral -- and gemma3)", path,
                            one_line(arch)));
  const bool gemma3 = arch == "gemma3";
  const std::string p = arch + ".";
  const int64_t hidden = positive(file, p + "embedding_length");
  const int64_t layers = positive(file, p + "block_count");
  const int64_t heads = positive(file, p + "attention.head_count");
  const int64_t kv_heads = file.find(p + "attention.head_count_kv")
                               ? positive(file, p + "attention.head_count_kv") : heads;
  const int64_t head_dim = positive_or(file, p + "attention.key_length", hidden / heads);
  if (positive_or(file, p + "attention.value_length", head_dim) != head_dim)
    throw Error(fmt::format("{}: value_length differs from key_length", path));
  const int64_t rotary_dim = positive_or(file, p + "rope.dimension_count", head_dim);
  if (rotary_dim != head_dim && !gemma3)
    throw Error(fmt::format("{}: {}rope.dimension_count {} differs from the head size {} (partial "
                            "rotation is not supported for llama files)", path, p, rotary_dim, head_dim));
  const formats::GgufTensorInfo& embedding = file.tensor("token_embd.weight");
  const auto embedding_shape = embedding.shape();
  if (embedding_shape.size() != 2 || embedding_shape[1] != hidden)
    throw Error(fmt::format("{}: token_embd.weight must be [vocab, {}]", path, hidden));
  const int64_t vocab = positive_or(file, p + "vocab_size", embedding_shape[0]);
  if (vocab != embedding_shape[0])
    throw Error(fmt::format("{}: {}vocab_size {} differs from token_embd.weight's {} rows", path, p,
                            vocab, embedding_shape[0]));
  const bool tied = file.find_tensor("output.weight") == nullptr;
  if (gemma3 && !tied) throw Error(fmt::format("{}: a gemma3 file with output.weight (untied)", path));

  GgufCheckpoint out;
  json& c = out.config;
  c = {{"model_type", "llama"},
       {"architectures", {"LlamaForCausalLM"}},
       {"vocab_size", vocab},
       {"hidden_size", hidden},
       {"intermediate_size", positive(file, p + "feed_forward_length")},
       {"num_hidden_layers", layers},
       {"num_attention_heads", heads},
       {"num_key_value_heads", kv_heads},
       {"head_dim", head_dim},
       {"max_position_embeddings", positive_or(file, p + "context_length", 2048)},
       {"rms_norm_eps", file.get_number(p + "attention.layer_norm_rms_epsilon")},
       {"rope_theta", file.find(p + "rope.freq_base") ? file.get_number(p + "rope.freq_base") : 10000.0},
       {"rope_scaling", rope_scaling(file, arch)},
       {"hidden_act", "silu"},
       {"attention_bias", false},
       {"mlp_bias", false},
       {"tie_word_embeddings", tied},
       {"torch_dtype", "float32"}};
  if (gemma3) {
    // Gemma 3's text model as transformers reads the file: GELU-tanh, 1 + w norms (stored with the
    // 1 added: subtracted below), sliding layers of attention.sliding_window with the default
    // pattern (every 6th layer global) and local base 10000; the scale 1/sqrt(key_length), as
    // llama.cpp computes it (transformers' default query_pre_attn_scalar 256 is the same for
    // every released size).
    c["model_type"] = "gemma3_text";
    c["architectures"] = {"Gemma3ForCausalLM"};
    c.erase("hidden_act");
    c.erase("mlp_bias");
    c["hidden_activation"] = "gelu_pytorch_tanh";
    c["query_pre_attn_scalar"] = head_dim;
    c["sliding_window"] = positive(file, p + "attention.sliding_window");
    c["sliding_window_pattern"] = 6;
    c["rope_local_base_freq"] = 10000.0;
    if (!c["rope_scaling"].is_null())
      throw Error(fmt::format("{}: rope scaling in a gemma3 file is not supported", path));
  }
  for (const auto& [key, name] : {std::pair<const char*, const char*>{"tokenizer.ggml.bos_token_id", "bos_token_id"},
                                  {"tokenizer.ggml.eos_token_id", "eos_token_id"},
                                  {"tokenizer.ggml.padding_token_id", "pad_token_id"}})
    if (file.find(key)) c[name] = file.get_integer(key);

  // Tensor names: llama.cpp's -> transformers'.
  static const std::regex block(R"(^blk\.(\d+)\.([a-z_]+)\.weight$)");
  static const std::map<std::string, std::string> llama_names = {
      {"attn_norm", "input_layernorm"}, {"attn_q", "self_attn.q_proj"},
      {"attn_k", "self_attn.k_proj"},   {"attn_v", "self_attn.v_proj"},
      {"attn_output", "self_attn.o_proj"}, {"ffn_norm", "post_attention_layernorm"},
      {"ffn_gate", "mlp.gate_proj"},    {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"}};
  static const std::map<std::string, std::string> gemma3_names = {
      {"attn_norm", "input_layernorm"}, {"attn_q", "self_attn.q_proj"},
      {"attn_k", "self_attn.k_proj"},   {"attn_v", "self_attn.v_proj"},
      {"attn_output", "self_attn.o_proj"}, {"attn_q_norm", "self_attn.q_norm"},
      {"attn_k_norm", "self_attn.k_norm"}, {"post_attention_norm", "post_attention_layernorm"},
      {"ffn_norm", "pre_feedforward_layernorm"}, {"post_ffw_norm", "post_feedforward_layernorm"},
      {"ffn_gate", "mlp.gate_proj"},    {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"}};
  const auto& block_names = gemma3 ? gemma3_names : llama_names;
  for (const auto& info : file.tensors()) {
    std::string name;
    std::smatch m;
    if (info.name == "token_embd.weight") {
      name = "model.embed_tokens.weight";
    } else if (info.name == "output_norm.weight") {
      name = "model.norm.weight";
    } else if (info.name == "output.weight") {
      name = "lm_head.weight";
    } else if (std::regex_match(info.name, m, block) && block_names.count(m[2].str())) {
      if (m[1].str().size() > 9 || std::stoll(m[1].str()) >= layers)
        throw Error(fmt::format("{}: tensor '{}' is beyond the {} blocks", path, info.name, layers));
      name = fmt::format("model.layers.{}.{}.weight", m[1].str(), block_names.at(m[2].str()));
    } else if (info.name == "rope_freqs.weight") {
      throw Error(fmt::format("{}: rope_freqs.weight (Llama 3.1's rope scaling as a tensor) is not "
                              "supported", path));
    } else {
      throw Error(fmt::format("{}: unknown tensor '{}' for a {} file", path, one_line(info.name), arch));
    }
    const auto shape = info.shape();
    at::Tensor t = at::empty(shape, at::kFloat);
    file.dequantize(info, t.data_ptr<float>());
    if (!gemma3 && info.name.find(".attn_q.") != std::string::npos)
      t = unpermute_rows(t, heads, info.name, path);
    if (!gemma3 && info.name.find(".attn_k.") != std::string::npos)
      t = unpermute_rows(t, kv_heads, info.name, path);
    if (gemma3 && info.name.size() > 11 && info.name.compare(info.name.size() - 11, 11, "norm.weight") == 0)
      t = t - 1.0f;  // llama.cpp stores Gemma's 1 + w
    out.tensors.emplace(std::move(name), std::move(t));
  }
  return out;
}

text::Tokenizer load_tokenizer(const std::string& path) {
  return is_gguf_file(path) ? formats::read_gguf_tokenizer(path) : text::load_tokenizer(path);
}

std::shared_ptr<models::Model> load_gguf(const std::string& path, HuggingFaceModel* info) {
  GgufCheckpoint checkpoint = read_gguf_checkpoint(path);
  const auto tensors = memory_checkpoint(std::move(checkpoint.tensors), path);
  return load_huggingface_checkpoint(checkpoint.config, path + " metadata", *tensors, info);
}

}  // namespace attnkit::io
