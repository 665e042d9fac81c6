#include "attnkit/io/model_directory.h"

#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/io/atomic_file.h"
#include "attnkit/io/safetensors.h"
#include "model_size_check.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <filesystem>
#include <set>

namespace attnkit::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kAttnkitFormat = 1;

json attnkit_config_json(const models::TaskModel& model) {
  return json{{"attnkit_format", kAttnkitFormat}, {"model", model->config()}, {"heads", model->heads()}};
}

void read_attnkit_config(const json& j, const std::string& where, models::TransformerConfig& config,
                         models::HeadsConfig& heads) {
  if (!j.is_object() || !j.contains("attnkit_format"))
    throw Error(fmt::format("{}: not an attnkit model config (no 'attnkit_format')", where));
  if (j["attnkit_format"] != kAttnkitFormat)
    throw Error(fmt::format("{}: attnkit_format {} is not supported (this build reads {})", where,
                            j["attnkit_format"].dump(), kAttnkitFormat));
  if (!j.contains("model")) throw Error(fmt::format("{}: missing 'model'", where));
  try {
    config = j.at("model").get<models::TransformerConfig>();
    heads = j.contains("heads") ? j.at("heads").get<models::HeadsConfig>() : models::HeadsConfig{};
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", where, e.what()));
  }
}

json parse_json_text(const std::string& text, const std::string& where) {
  try {
    return json::parse(text);
  } catch (const std::exception& e) {  // json parse_error, or out_of_range for 1e400
    throw Error(fmt::format("{}: not valid JSON ({})", where, e.what()));
  }
}

// Loads every parameter (and any buffer present) of `model` from `file` by attnkit name; lists
// unknown and missing names.
void load_parameters(models::TaskModel& model, const SafetensorsFile& file) {
  torch::NoGradGuard no_grad;
  std::vector<std::string> missing, mismatched, unknown;
  std::set<std::string> expected;
  for (auto& item : model->named_parameters(true)) {
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
    item.value().copy_(file.tensor(item.key()));
  }
  // Buffers (e.g. sinusoidal position tables) are optional: trainer checkpoints carry them.
  for (auto& item : model->named_buffers(true)) {
    expected.insert(item.key());
    if (file.contains(item.key()) && file.entry(item.key()).shape == item.value().sizes().vec())
      item.value().copy_(file.tensor(item.key()));
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

LoadedModel finish(models::TaskModel task, std::string format) {
  LoadedModel out;
  task->eval();
  out.config = task->config();
  out.heads = task->heads();
  out.task = task;
  out.model = task->transformer;
  out.format = std::move(format);
  return out;
}

LoadedModel load_attnkit(const std::string& weights_path, const json* config_json,
                         const std::string& config_where) {
  auto file = SafetensorsFile::open(weights_path);
  models::TransformerConfig config;
  models::HeadsConfig heads;
  if (config_json) {
    read_attnkit_config(*config_json, config_where, config, heads);
  } else {
    auto it = file.metadata().find("attnkit_config");
    if (it == file.metadata().end())
      throw Error(fmt::format("{}: no 'attnkit_config' metadata and no config.json beside it",
                              weights_path));
    read_attnkit_config(parse_json_text(it->second, weights_path + " metadata"),
                        weights_path + " metadata", config, heads);
  }
  detail::check_config_fits_weights(config, heads, file, config_json ? config_where : weights_path + " metadata");
  models::TaskModel task(config, heads);
  load_parameters(task, file);
  return finish(task, "attnkit");
}

}  // namespace

LoadedModel load_model(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error(fmt::format("{}: no such file or directory", path));
  if (!fs::is_directory(path)) return load_attnkit(path, nullptr, "");
  const std::string config_path = (fs::path(path) / "config.json").string();
  const std::string weights_path = (fs::path(path) / "model.safetensors").string();
  if (!fs::exists(config_path)) {
    if (fs::exists(weights_path)) return load_attnkit(weights_path, nullptr, "");
    throw Error(fmt::format("{}: no config.json (expected a Hugging Face or attnkit model directory)", path));
  }
  const json config = parse_json_text(read_file(config_path), config_path);
  if (config.is_object() && config.contains("attnkit_format")) {
    if (!fs::exists(weights_path)) throw Error(fmt::format("{}: no model.safetensors", path));
    return load_attnkit(weights_path, &config, config_path);
  }
  HuggingFaceModel info;
  auto task = load_huggingface(path, &info);
  auto out = finish(task, "huggingface");
  out.huggingface = std::move(info);
  return out;
}

std::map<std::string, std::string> attnkit_metadata(const models::TaskModel& model) {
  return {{"format", "attnkit"}, {"attnkit_config", attnkit_config_json(model).dump()}};
}

void save_attnkit_model(models::TaskModel& model, const std::string& directory) {
  std::error_code ec;
  fs::create_directories(directory, ec);
  if (ec) throw Error(fmt::format("{}: cannot create directory ({})", directory, ec.message()));
  NamedTensors tensors;
  for (auto& item : model->named_parameters(true)) tensors.emplace_back(item.key(), item.value().detach());
  // Buffers too: some are not recomputed from the config (synthesizer-random-fixed's alignment).
  for (auto& item : model->named_buffers(true)) tensors.emplace_back(item.key(), item.value());
  save_safetensors((fs::path(directory) / "model.safetensors").string(), tensors,
                   attnkit_metadata(model));
  write_file_atomically((fs::path(directory) / "config.json").string(),
                        attnkit_config_json(model).dump(2) + "\n");
}

void save_model(LoadedModel& model, const std::string& from, const std::string& to,
                const std::string& format) {
  if (format != "attnkit" && format != "huggingface")
    throw Error(fmt::format("format must be 'attnkit' or 'huggingface' (got '{}')", format));
  if (format == "attnkit") {
    save_attnkit_model(model.task, to);
  } else {
    HuggingFaceModel info = model.huggingface;
    if (model.format != "huggingface") {
      info.config_json = config_to_huggingface(model.task->config(), model.heads);
      info.layout = default_layout(model.task->config(), model.heads);
    }
    save_huggingface(model.task, info, to);
  }
  if (!fs::is_directory(from)) return;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                           "vocab.txt", "vocab.json", "merges.txt"}) {
    const auto source = fs::path(from) / name;
    if (fs::exists(source))
      write_file_atomically((fs::path(to) / name).string(), read_file(source.string()));
  }
}

void convert_model(const std::string& from, const std::string& to, const std::string& format) {
  if (format != "attnkit" && format != "huggingface")
    throw Error(fmt::format("convert: format must be 'attnkit' or 'huggingface' (got '{}')", format));
  std::error_code same_ec;
  if (fs::equivalent(from, to, same_ec))
    throw Error("convert: the output directory must differ from the input");
  auto loaded = load_model(from);
  save_model(loaded, from, to, format);
}

}  // namespace attnkit::io
