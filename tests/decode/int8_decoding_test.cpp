// int8 decoding (models/quantize.h) on tiny random GPT-2-shaped models: cached greedy decoding
// follows the int8 full forward's argmax, the logits stay near float32's, and a model saved
// int8 (`convert --quantize int8`) loads back as int8 with the same logits and ids.
#include "../../src/ops/cpu/int8_gemm_kernel.h"
#include "attnkit/decode/incremental.h"
#include "attnkit/decode/language_models.h"
#include "attnkit/error.h"
#include "attnkit/io/model_directory.h"
#include "attnkit/models/quantize.h"
#include "attnkit/models/task_model.h"
#include "support/test_files.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

namespace {

using namespace attnkit;

constexpr int64_t kInt8TestVocab = 61;

// hidden 40 and an FFN of 160: no multiple of the int8 kernel's 16 values per vector.
models::TaskModel int8_test_lm(bool tied) {
  auto config = models::TransformerConfig::gpt2(kInt8TestVocab, 40, 2, 4);
  config.dropout = 0.0;
  config.max_positions = 64;
  models::HeadsConfig heads;
  heads.causal_lm = true;
  heads.tie_lm = tied;
  torch::manual_seed(tied ? 5 : 6);
  models::TaskModel model(config, heads);
  model->eval();
  return model;
}

at::Tensor int8_test_logits(models::TaskModel& model, const std::vector<int64_t>& ids) {
  models::TaskInputs in;
  in.input_ids = torch::tensor(ids, at::kLong).unsqueeze(0);
  return model->forward(in).causal_lm_logits[0];
}

// Greedy ids from the cached session (prefill, then one row a step) and each step's logits.
std::vector<int64_t> int8_test_greedy(models::TaskModel& model, std::vector<int64_t> ids,
                                   int64_t steps, std::vector<at::Tensor>* logits) {
  models::DecodingRequest request;
  request.prompts = {ids};
  auto session = decode::start_decoding(*model, request).session;
  const int64_t n = static_cast<int64_t>(ids.size());
  session->start(1, n + steps);
  at::Tensor x = torch::tensor(ids, at::kLong).unsqueeze(0);
  at::Tensor valid = at::ones({1, n}, at::kBool);
  at::Tensor positions = decode::positions_from_valid(valid);
  std::vector<int64_t> out;
  for (int64_t s = 0; s < steps; ++s) {
    const at::Tensor l = session->forward(x, valid, positions)[0];
    if (logits) logits->push_back(l);
    const int64_t next = l.argmax().item<int64_t>();
    out.push_back(next);
    const int64_t pos = positions[0][positions.size(1) - 1].item<int64_t>() + 1;
    x = torch::full({1, 1}, next, at::kLong);
    valid = at::ones({1, 1}, at::kBool);
    positions = torch::full({1, 1}, pos, at::kLong);
  }
  return out;
}

TEST(Int8Decoding, CachedGreedyFollowsFullForwardArgmax) {
  torch::NoGradGuard no_grad;
  for (bool tied : {true, false}) {
    auto model = int8_test_lm(tied);
    models::quantize_model(*model, layers::ComputeType::Int8);
    EXPECT_EQ(models::model_compute_type(*model), layers::ComputeType::Int8);
    if (!tied) {
      EXPECT_EQ(model->lm_head.numel(), 0);  // the untied head's float copy is gone
    }
    const std::vector<int64_t> prompt = {3, 17, 42, 8, 29};
    std::vector<at::Tensor> step_logits;
    const auto ids = int8_test_greedy(model, prompt, 12, &step_logits);
    std::vector<int64_t> sequence = prompt;
    for (size_t s = 0; s < ids.size(); ++s) {
      const at::Tensor full = int8_test_logits(model, sequence);
      const at::Tensor last = full[full.size(0) - 1];
      EXPECT_EQ(last.argmax().item<int64_t>(), ids[s]) << "tied " << tied << " step " << s;
      // The same int8 arithmetic row by row: only the attention's float order differs.
      EXPECT_TRUE(torch::allclose(step_logits[s], last, 1e-4, 1e-4))
          << "step " << s << ": " << (step_logits[s] - last).abs().max().item<double>();
      sequence.push_back(ids[s]);
    }
  }
}

// Tolerance stated in docs/decoding.md: on this model the int8 logits are within 2% of the float32
// logits' largest magnitude (the measured worst is printed).
TEST(Int8Decoding, LogitsNearFloat32) {
  torch::NoGradGuard no_grad;
  auto model = int8_test_lm(true);
  const std::vector<int64_t> ids = {1, 5, 9, 33, 60, 2, 14, 27, 45, 50, 11};
  const at::Tensor reference = int8_test_logits(model, ids);
  models::quantize_model(*model, layers::ComputeType::Int8);
  const at::Tensor quantized = int8_test_logits(model, ids);
  const double err = (quantized - reference).abs().max().item<double>();
  const double scale = reference.abs().max().item<double>();
  std::printf("int8 vs float32 logits: max abs error %.4g, largest |logit| %.4g (%.2f%%)\n", err,
              scale, 100 * err / scale);
  EXPECT_GT(err, 0.0);  // int8 ran
  EXPECT_LT(err, 0.02 * scale);
}

// generate packs the int8 layers for the panel kernel where it runs (models::pack_int8_model):
// the same logits to the bit and the same ids; a packed model is not saved.
TEST(Int8Decoding, PackedModelGivesTheSameLogits) {
  torch::NoGradGuard no_grad;
  const auto root = attnkit::testing::scratch_directory("int8_packed");
  for (bool tied : {true, false}) {
    auto model = int8_test_lm(tied);
    models::quantize_model(*model, layers::ComputeType::Int8);
    const std::vector<int64_t> prompt = {2, 7, 1, 8, 28, 18};
    const at::Tensor logits = int8_test_logits(model, prompt);
    const auto ids = int8_test_greedy(model, prompt, 10, nullptr);
    const int64_t packed = models::pack_int8_model(*model);
    // 2 layers × (q, k, v, o, fc_in, fc_out) where this process runs the panel kernel.
    EXPECT_EQ(packed, ops::cpu::int8_panels_preferred(40) ? 12 : 0);
    EXPECT_EQ(layers::has_packed_int8(*model), packed > 0);
    EXPECT_EQ(models::pack_int8_model(*model), 0);  // idempotent
    EXPECT_TRUE(torch::equal(int8_test_logits(model, prompt), logits));
    EXPECT_EQ(int8_test_greedy(model, prompt, 10, nullptr), ids);
    if (packed > 0) {
      io::LoadedModel loaded;
      loaded.model = model.ptr();
      loaded.task = model;
      EXPECT_THROW(io::save_model(loaded, (root / "packed").string(), "attnkit"), Error);
    }
  }
}

TEST(Int8Decoding, SavedInt8ModelLoadsBackAsInt8) {
  torch::NoGradGuard no_grad;
  const auto root = attnkit::testing::scratch_directory("int8_decoding");
  for (bool tied : {true, false}) {
    auto model = int8_test_lm(tied);
    const auto float_dir = root / (tied ? "float_tied" : "float_untied");
    io::save_attnkit_model(model, float_dir.string());
    // convert --quantize int8 from a float directory, and quantizing at load, agree.
    const auto int8_dir = root / (tied ? "int8_tied" : "int8_untied");
    io::convert_model(float_dir.string(), int8_dir.string(), "attnkit", layers::ComputeType::Int8);
    auto at_load = io::load_model(float_dir.string());
    models::quantize_model(*at_load.model, layers::ComputeType::Int8);
    auto loaded = io::load_model(int8_dir.string());
    EXPECT_EQ(models::model_compute_type(*loaded.model), layers::ComputeType::Int8);
    const std::vector<int64_t> prompt = {4, 8, 15, 16, 23, 42};
    EXPECT_TRUE(torch::equal(int8_test_logits(at_load.task, prompt), int8_test_logits(loaded.task, prompt)));
    EXPECT_EQ(int8_test_greedy(at_load.task, prompt, 10, nullptr),
              int8_test_greedy(loaded.task, prompt, 10, nullptr));
    // Quantizing the loaded int8 model again changes nothing.
    models::quantize_model(*loaded.model, layers::ComputeType::Int8);
    EXPECT_TRUE(torch::equal(int8_test_logits(at_load.task, prompt), int8_test_logits(loaded.task, prompt)));
    // An int8 model has no Hugging Face form; --quantize writes attnkit format only.
    EXPECT_THROW(io::save_model(loaded, (root / "hf").string(), "huggingface"), Error);
    EXPECT_THROW(io::convert_model(float_dir.string(), (root / "hf2").string(), "huggingface",
                                   layers::ComputeType::Int8),
                 Error);
  }
}

}  // namespace
