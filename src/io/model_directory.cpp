#include "attnkit/io/model_directory.h"

#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/io/atomic_file.h"
#include "attnkit/io/safetensors.h"
#include "attnkit/models/model_factory.h"
#include "attnkit/models/deferred_init.h"
#include "attnkit/layers/lora.h"
#include "attnkit/models/quantize.h"
#include "attnkit/formats/gguf.h"
#include "attnkit/formats/gguf_tokenizer.h"
#include "attnkit/io/gguf_model.h"
#include "attnkit/text/pretrained.h"
#include "model_size_check.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <set>

namespace attnkit::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kAttnkitFormat = 1;

json attnkit_config_json(const models::Model& model) {
  json j = model.config_description();
  j["attnkit_format"] = kAttnkitFormat;
  return j;
}

// The model an attnkit config describes, after the size check against `weights` (before any
// allocation).
std::shared_ptr<models::Model> read_attnkit_config(const json& j, const std::string& where,
                                                   const SafetensorsFile& weights,
                                                   const std::string& size_where) {
  if (!j.is_object() || !j.contains("attnkit_format"))
    throw Error(fmt::format("{}: not an attnkit model config (no 'attnkit_format')", where));
  if (j["attnkit_format"] != kAttnkitFormat)
    throw Error(fmt::format("{}: attnkit_format {} is not supported (this build reads {})", where,
                            one_line(j["attnkit_format"].dump()), kAttnkitFormat));
  json description = j;
  description.erase("attnkit_format");
  return models::make_model(description, where, [&](const std::vector<models::StackDescription>& stacks) {
    std::vector<std::pair<models::TransformerConfig, models::HeadsConfig>> configs;
    for (const auto& stack : stacks) configs.emplace_back(stack.config, stack.heads);
    detail::check_config_fits_weights(configs, weights, size_where);
  });
}

json parse_json_text(const std::string& text, const std::string& where) {
  try {
    return json::parse(text);
  } catch (const std::exception& e) {  // json parse_error, or out_of_range for 1e400
    throw Error(fmt::format("{}: not valid JSON ({})", where, e.what()));
  }
}

// The names of an int8 model's weights and scales (layers/int8_linear.h, models/quantize.h).
bool is_int8_state(const std::string& name) {
  for (const std::string suffix : {"weight_int8", "weight_scale", "lm_head_int8", "lm_head_scale"})
    if (name.size() >= suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return true;
  return false;
}

// `target` from the file's tensor `name`: the file's pages become its memory where they are
// stored as the model holds them, on a cache line (copy-on-write, DeferredInit::adopt); otherwise
// one copy.
void fill(const SafetensorsFile& file, const std::string& name, const at::Tensor& target) {
  if (!models::DeferredInit::adopt(target, file.shared_tensor(name)))
    file.read_into(name, [&](const at::Tensor& stored) { target.copy_(stored); });
}

// Loads every parameter (and any buffer present) of `model` from `file` by attnkit name; lists
// unknown and missing names.
void load_parameters(torch::nn::Module& model, const SafetensorsFile& file) {
  torch::NoGradGuard no_grad;
  std::vector<std::string> missing, mismatched, unknown;
  std::set<std::string> expected;
  for (auto& item : model.named_parameters(true)) {
    expected.insert(item.key());
    if (!file.contains(item.key())) {
      missing.push_back(item.key());
      continue;
    }
    const auto& entry = file.entry(item.key());
    if (entry.shape != item.value().sizes().vec()) {
      mismatched.push_back(fmt::format("{}: expected [{}], got [{}]", item.key(),
                                       fmt::join(item.value().sizes(), ", "), fmt::join(entry.shape, ", ")));
      continue;
    }
    fill(file, item.key(), item.value());
  }
  // Buffers (e.g. sinusoidal position tables) are optional: trainer checkpoints carry them. An
  // int8 model's weights and scales (models/quantize.h) are not.
  for (auto& item : model.named_buffers(true)) {
    expected.insert(item.key());
    if (file.contains(item.key()) && file.entry(item.key()).shape == item.value().sizes().vec())
      fill(file, item.key(), item.value());
    else if (is_int8_state(item.key()))
      missing.push_back(item.key());
  }
  for (const auto& name : file.names())
    if (!expected.count(name)) unknown.push_back(name);
  auto list = [](const std::vector<std::string>& names) {
    return fmt::format("{}{}", fmt::join(names.begin(), names.begin() + std::min<size_t>(names.size(), 12), ", "),
                       names.size() > 12 ? fmt::format(", ... ({} in all)", names.size()) : "");
  };
  if (!mismatched.empty()) throw Error(fmt::format("{}: shape mismatch: {}", file.path(), list(mismatched)));
  if (!missing.empty()) throw Error(fmt::format("{}: missing tensors: {}", file.path(), list(missing)));
  if (!unknown.empty()) throw Error(fmt::format("{}: unknown tensors: {}", file.path(), list(unknown)));
}

LoadedModel finish(std::shared_ptr<models::Model> model, std::string path, std::string format) {
  LoadedModel out;
  model->module().eval();
  out.model = std::move(model);
  out.path = std::move(path);
  out.format = std::move(format);
  if (auto task = std::dynamic_pointer_cast<models::TaskModelImpl>(out.model)) {
    out.task = models::TaskModel(task);
    out.transformer = task->transformer;
    out.config = task->config();
    out.heads = task->heads();
  }
  return out;
}

LoadedModel load_attnkit(const std::string& weights_path, const json* config_json,
                         const std::string& config_where, const std::string& path) {
  auto file = SafetensorsFile::open(weights_path);
  auto build = [&] {
    if (config_json) return read_attnkit_config(*config_json, config_where, file, config_where);
    auto it = file.metadata().find("attnkit_config");
    if (it == file.metadata().end())
      throw Error(fmt::format("{}: no 'attnkit_config' metadata and no config.json beside it",
                              weights_path));
    const std::string where = weights_path + " metadata";
    return read_attnkit_config(parse_json_text(it->second, where), where, file, where);
  };
  // Built without the random initialisation the file overwrites (models/deferred_init.h).
  models::DeferredInit deferred;
  std::shared_ptr<models::Model> model = build();
  // A file written by `convert --quantize int8` loads into the int8 model's layout.
  const auto names = file.names();
  if (std::any_of(names.begin(), names.end(), is_int8_state))
    models::quantize_model(*model, layers::ComputeType::Int8, /*values=*/false);
  // A training checkpoint of `train --lora.rank R` holds LoRA adapters beside the frozen weights:
  // loaded as they are, then merged, so that every user of a model file sees a plain model.
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
  for (const auto& name : names) shapes.emplace_back(name, file.entry(name).shape);
  const bool lora = layers::add_lora_of_file(model->module(), shapes) > 0;
  load_parameters(model->module(), file);
  deferred.finish(*model, build);
  if (lora) layers::merge_lora(model->module());
  return finish(model, path, "attnkit");
}

bool has_model_files(const fs::path& directory) {
  std::error_code ec;
  return fs::exists(directory / "config.json", ec) || fs::exists(directory / "model.safetensors", ec);
}

// "step-00000100" -> 100, "checkpoint-7" -> 7; -1 for a name that does not end in digits.
int64_t trailing_step(const std::string& name) {
  size_t digits = name.size();
  while (digits > 0 && std::isdigit(static_cast<unsigned char>(name[digits - 1]))) --digits;
  if (digits == name.size() || name.size() - digits > 15) return -1;
  return std::stoll(name.substr(digits));
}

}  // namespace

std::vector<std::pair<int64_t, std::string>> run_model_checkpoints(const std::string& run) {
  std::vector<std::pair<int64_t, std::string>> out;
  for (const fs::path& folder : {fs::path(run) / "checkpoints", fs::path(run)}) {
    std::error_code ec;
    if (!fs::is_directory(folder, ec)) continue;
    for (const auto& entry : fs::directory_iterator(folder, ec)) {
      const std::string name = entry.path().filename().string();
      const int64_t step = trailing_step(name);
      if (step < 0 || name.rfind(".tmp-", 0) == 0 || !entry.is_directory(ec)) continue;
      if (fs::exists(entry.path() / "model.safetensors", ec)) out.emplace_back(step, entry.path().string());
    }
    if (!out.empty()) break;
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string resolve_model_path(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error(fmt::format("{}: no such file or directory", path));
  if (!fs::is_directory(path, ec) || has_model_files(path)) return path;
  // A run directory: its best checkpoint, else its newest.
  const fs::path best = fs::path(path) / "checkpoints" / "best";
  if (fs::exists(best / "model.safetensors", ec)) return best.string();
  const auto steps = run_model_checkpoints(path);
  if (!steps.empty()) return steps.back().second;
  throw Error(fmt::format("{}: no config.json (expected a Hugging Face or attnkit model directory, "
                          "a checkpoint, or a run directory with checkpoints/)",
                          path));
}

LoadedModel load_model(const std::string& given) {
  const std::string path = resolve_model_path(given);
  if (is_gguf_file(path)) {
    HuggingFaceModel info;
    auto out = finish(load_gguf(path, &info), path, "huggingface");
    out.huggingface = std::move(info);
    return out;
  }
  if (!fs::is_directory(path)) return load_attnkit(path, nullptr, "", path);
  const std::string config_path = (fs::path(path) / "config.json").string();
  const std::string weights_path = (fs::path(path) / "model.safetensors").string();
  if (!fs::exists(config_path)) return load_attnkit(weights_path, nullptr, "", path);
  const json config = parse_json_text(read_file(config_path), config_path);
  if (config.is_object() && config.contains("attnkit_format")) {
    if (!fs::exists(weights_path)) throw Error(fmt::format("{}: no model.safetensors", path));
    return load_attnkit(weights_path, &config, config_path, path);
  }
  HuggingFaceModel info;
  auto out = finish(load_huggingface(path, &info), path, "huggingface");
  out.huggingface = std::move(info);
  return out;
}

std::unique_ptr<text::TextTokenizer> tokenizer_for_model(const std::string& given_path,
                                                         const std::string& model_path) {
  const std::string& path = given_path.empty() ? model_path : given_path;
  if (is_gguf_file(path)) return std::make_unique<text::Tokenizer>(formats::read_gguf_tokenizer(path));
  return text::tokenizer_for_model(given_path, model_path);
}

models::TaskModel LoadedModel::task_model(const std::string& what) const {
  if (!task) model->task_model(fmt::format("{}: {}", path, what));  // throws, naming the shape
  return task;
}

std::map<std::string, std::string> attnkit_metadata(const models::Model& model) {
  return {{"format", "attnkit"}, {"attnkit_config", attnkit_config_json(model).dump()}};
}

void save_attnkit_model(models::Model& model, const std::string& directory) {
  std::error_code ec;
  fs::create_directories(directory, ec);
  if (ec) throw Error(fmt::format("{}: cannot create directory ({})", directory, ec.message()));
  NamedTensors tensors;
  for (auto& item : model.module().named_parameters(true))
    tensors.emplace_back(item.key(), item.value().detach());
  // Buffers too: some are not recomputed from the config (synthesizer-random-fixed's alignment).
  for (auto& item : model.module().named_buffers(true)) tensors.emplace_back(item.key(), item.value());
  save_safetensors((fs::path(directory) / "model.safetensors").string(), tensors,
                   attnkit_metadata(model), SafetensorsLayout::kMappable);
  write_file_atomically((fs::path(directory) / "config.json").string(),
                        attnkit_config_json(model).dump(2) + "\n");
}

void save_model(LoadedModel& model, const std::string& to, const std::string& format) {
  if (format != "attnkit" && format != "huggingface")
    throw Error(fmt::format("format must be 'attnkit' or 'huggingface' (got '{}')", format));
  if (layers::has_packed_int8(model.model->module()))
    throw Error("save: this int8 model is packed for decoding (generate); load it again to save it");
  if (format == "huggingface" && models::model_compute_type(*model.model) == layers::ComputeType::Int8)
    throw Error("format huggingface: an int8 model is saved in attnkit format only");
  if (format == "attnkit") {
    save_attnkit_model(*model.model, to);
  } else {
    // A Hugging Face input keeps its config.json and layout; any other gets a fresh config of the
    // family that expresses the model (io/huggingface.h's save_huggingface).
    save_huggingface(*model.model, model.format == "huggingface" ? model.huggingface : HuggingFaceModel{}, to);
  }
  if (is_gguf_file(model.path)) {  // its tokenizer.ggml.* metadata as transformers reads it
    const auto file = formats::GgufFile::open(model.path);
    write_file_atomically((fs::path(to) / "tokenizer.json").string(),
                          formats::gguf_tokenizer_json(file).dump(2) + "\n");
    write_file_atomically((fs::path(to) / "tokenizer_config.json").string(),
                          formats::gguf_tokenizer_config_json(file).dump(2) + "\n");
    return;
  }
  if (!fs::is_directory(model.path)) return;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                           "vocab.txt", "vocab.json", "merges.txt", "source.spm", "target.spm",
                           "generation_config.json"}) {
    const auto source = fs::path(model.path) / name;
    if (fs::exists(source))
      write_file_atomically((fs::path(to) / name).string(), read_file(source.string()));
  }
}

void convert_model(const std::string& from, const std::string& to, const std::string& format,
                   layers::ComputeType quantize) {
  if (format != "attnkit" && format != "huggingface")
    throw Error(fmt::format("convert: format must be 'attnkit' or 'huggingface' (got '{}')", format));
  std::error_code same_ec;
  if (fs::equivalent(from, to, same_ec))
    throw Error("convert: the output directory must differ from the input");
  if (quantize != layers::ComputeType::Float32 && format != "attnkit")
    throw Error("convert: --quantize int8 writes attnkit format only (leave --format at attnkit)");
  auto loaded = load_model(from);
  models::quantize_model(*loaded.model, quantize);
  save_model(loaded, to, format);
}

}  // namespace attnkit::io
