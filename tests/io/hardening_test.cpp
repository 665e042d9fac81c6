// Regression tests for inputs found by fuzzing and by hand (fuzz/, docs/robustness.md): each once
// crashed, escaped as a non-attnkit exception or allocated what a header claimed; now each is one
// attnkit::Error line naming the file.
#include "attnkit/error.h"
#include "attnkit/io/huggingface.h"
#include "attnkit/io/model_directory.h"
#include "attnkit/io/safetensors.h"
#include "attnkit/models/task_model.h"
#include "support/test_files.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <filesystem>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace attnkit {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::scratch_directory;
using testing::write_bytes;

std::string safetensors_bytes(const std::string& header, const std::string& data = "") {
  std::string bytes(8, '\0');
  for (size_t i = 0; i < 8; ++i) bytes[i] = static_cast<char>((uint64_t{header.size()} >> (8 * i)) & 0xFF);
  return bytes + header + data;
}

void expect_one_line_naming(const std::string& message, const std::string& path, const std::string& part) {
  EXPECT_EQ(message.rfind(path + ": ", 0), 0u) << message;
  EXPECT_NE(message.find(part), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

// nlohmann::json throws out_of_range (not parse_error) for a number beyond double: it escaped
// every loader as a foreign exception without the file name.
TEST(Hardening, NumberOverflowInJsonIsAnErrorNamingTheFile) {
  const auto dir = scratch_directory("io");
  const std::string st = write_bytes(dir / "a.safetensors",
                                     safetensors_bytes(R"({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1], "x": 1e400}})", "\x01"));
  expect_one_line_naming(error_of([&] { io::SafetensorsFile::open(st); }), st, "header is not valid JSON");
  fs::create_directories(dir / "model");
  const std::string config = write_bytes(dir / "model" / "config.json", R"({"model_type": "bert", "vocab_size": 1e400})");
  write_bytes(dir / "model" / "model.safetensors", safetensors_bytes("{}"));
  expect_one_line_naming(error_of([&] { io::load_model((dir / "model").string()); }), config, "not valid JSON");
}

TEST(Hardening, SafetensorsDeepNestingAndSignedZero) {
  const auto dir = scratch_directory("io");
  const std::string deep = write_bytes(
      dir / "deep.safetensors",
      safetensors_bytes(R"({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1], "x": )" + std::string(100000, '[') +
                            std::string(100000, ']') + "}}",
                        "\x01"));
  expect_one_line_naming(error_of([&] { io::SafetensorsFile::open(deep); }), deep, "deeper than 127 levels");
  // 125 arrays + the entry + the header object = 127 levels: accepted, as by the reference.
  const std::string ok = write_bytes(
      dir / "ok.safetensors",
      safetensors_bytes(R"({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1], "x": )" + std::string(125, '[') +
                            std::string(125, ']') + "}}",
                        "\x01"));
  EXPECT_EQ(error_of([&] { io::SafetensorsFile::open(ok); }), "");
  const std::string minus_zero =
      write_bytes(dir / "minus_zero.safetensors", safetensors_bytes(R"({"a": {"dtype": "U8", "shape": [-0], "data_offsets": [0, 0]}})"));
  expect_one_line_naming(error_of([&] { io::SafetensorsFile::open(minus_zero); }), minus_zero, "non-negative");
  // Found by the differential test: nlohmann::json skipped a byte order mark the reference refuses.
  const std::string bom = write_bytes(dir / "bom.safetensors", safetensors_bytes("\xEF\xBB\xBF{}"));
  expect_one_line_naming(error_of([&] { io::SafetensorsFile::open(bom); }), bom, "byte order mark");
}

// A config claiming a huge model beside a tiny weights file is refused before anything is
// allocated (it used to allocate what the config said, e.g. 10^12 floats).
// A Hugging Face directory whose config.json is JSON but no object (or names an unknown model):
// the message said "config.json: ..." without the directory (fuzz/model_directory_fuzz,
// fuzz/regressions/model_directory/crash-5419...).
TEST(Hardening, HuggingFaceConfigErrorsNameTheFile) {
  const auto dir = scratch_directory("io") / "config-errors";
  fs::create_directories(dir);
  write_bytes(dir / "model.safetensors", safetensors_bytes("{}"));
  for (const auto& [text, part] : std::vector<std::pair<std::string, std::string>>{
           {"51", "expected a JSON object"},
           {R"({"model_type": "t5"})", "model_type 't5' is not supported"}}) {
    const std::string config = write_bytes(dir / "config.json", text);
    expect_one_line_naming(error_of([&] { io::load_model(dir.string()); }), config, part);
  }
}

// A model_type with a JSON newline escape ("al\nbert") made a refusal of two lines: user strings
// in config.json errors are quoted on one line, and an unknown model_type is never read with
// another family's rules (fuzz/regressions/hf_config/model_type_with_newline_escape).
TEST(Hardening, HuggingFaceConfigQuotesUserStringsOnOneLine) {
  const std::string text = testing::read_bytes(fs::path(ATTNKIT_SOURCE_DIR) / "fuzz" / "regressions" /
                                               "hf_config" / "model_type_with_newline_escape");
  const auto config = nlohmann::json::parse(text);
  ASSERT_EQ(config["model_type"], "al\nbert");
  const std::string message = error_of([&] { io::config_from_huggingface(config); });
  EXPECT_EQ(message, "config.json: model_type 'al\\nbert' is not supported (attnkit reads bert, "
                     "albert, gpt2, marian, bart, roberta, llama, mistral, qwen2, gemma, gemma2, gemma3_text, phi3)");
  const auto dir = scratch_directory("io") / "newline";
  fs::create_directories(dir);
  write_bytes(dir / "model.safetensors", safetensors_bytes("{}"));
  const std::string path = write_bytes(dir / "config.json", text);
  expect_one_line_naming(error_of([&] { io::load_model(dir.string()); }), path,
                         "model_type 'al\\nbert' is not supported (attnkit reads bert, albert, gpt2, "
                         "marian, bart, roberta, llama, mistral, qwen2, gemma, gemma2, gemma3_text, phi3)");
  // The other strings a refusal quotes.
  nlohmann::json bert = {{"model_type", "bert"}, {"vocab_size", 10}, {"hidden_size", 4},
                         {"num_hidden_layers", 1}, {"num_attention_heads", 1}, {"intermediate_size", 8}};
  for (const auto& [key, value, part] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"position_embedding_type", "rel\nkey", "position_embedding_type 'rel\\nkey' is not supported"},
           {"hidden_act", "gelu\nfast", "hidden_act 'gelu\\nfast' is not supported"},
           {"hidden_act", "quick_gelu", "hidden_act 'quick_gelu' is not supported"}}) {
    nlohmann::json bad = bert;
    bad[key] = value;
    const std::string bad_message = error_of([&] { io::config_from_huggingface(bad); });
    EXPECT_NE(bad_message.find(part), std::string::npos) << bad_message;
    EXPECT_EQ(bad_message.find('\n'), std::string::npos) << bad_message;
  }
  nlohmann::json gpt2 = {{"model_type", "gpt2"}, {"vocab_size", 10}, {"n_embd", 4}, {"n_layer", 1},
                         {"n_head", 1}, {"activation_function", "gelu_fast"}};
  EXPECT_EQ(error_of([&] { io::config_from_huggingface(gpt2); }),
            "config.json: activation_function 'gelu_fast' is not supported (attnkit knows gelu, "
            "gelu_new, gelu_tanh, gelu_pytorch_tanh, relu, silu, swish)");
  // Every activation name attnkit knew is still read.
  for (const char* name : {"gelu", "gelu_new", "gelu_tanh", "gelu_pytorch_tanh", "relu", "silu", "swish"}) {
    gpt2["activation_function"] = name;
    EXPECT_EQ(error_of([&] { io::config_from_huggingface(gpt2); }), "") << name;
  }
}

TEST(Hardening, ConfigLargerThanItsWeightsIsRefusedBeforeAllocating) {
  const auto dir = scratch_directory("io");
  // Hugging Face layout.
  fs::create_directories(dir / "hf");
  nlohmann::json bert = {{"model_type", "bert"},        {"vocab_size", 1000000}, {"hidden_size", 1000000},
                         {"num_hidden_layers", 1000},   {"num_attention_heads", 1}, {"intermediate_size", 1000000},
                         {"max_position_embeddings", 16}, {"type_vocab_size", 2}};
  const std::string config = write_bytes(dir / "hf" / "config.json", bert.dump());
  write_bytes(dir / "hf" / "model.safetensors",
              safetensors_bytes(R"({"bert.embeddings.word_embeddings.weight": {"dtype": "F32", "shape": [1, 1], "data_offsets": [0, 4]}})",
                                std::string(4, '\0')));
  expect_one_line_naming(error_of([&] { io::load_model((dir / "hf").string()); }), config,
                         "the config describes a model of about");
  // attnkit layout: the config inside model.safetensors' metadata.
  auto small = models::TransformerConfig::bert(40, 16, 2, 2, 32);
  models::HeadsConfig heads;
  heads.masked_lm = true;
  models::TaskModel model(small, heads);
  io::save_attnkit_model(model, (dir / "attnkit").string());
  auto text = testing::read_bytes(dir / "attnkit" / "config.json");
  auto j = nlohmann::json::parse(text);
  j["model"]["hidden"] = 4000000;
  j["model"]["intermediate"] = 4000000;
  const std::string attnkit_config = write_bytes(dir / "attnkit" / "config.json", j.dump());
  expect_one_line_naming(error_of([&] { io::load_model((dir / "attnkit").string()); }), attnkit_config,
                         "the config describes a model of about");
  // The untouched config still loads.
  write_bytes(dir / "attnkit" / "config.json", text);
  EXPECT_EQ(error_of([&] { io::load_model((dir / "attnkit").string()); }), "");
}

}  // namespace
}  // namespace attnkit
