#include "attnkit/io/huggingface.h"

#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/io/atomic_file.h"
#include "attnkit/io/safetensors.h"
#include "hf_family.h"
#include "model_size_check.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <set>

namespace attnkit::io {
namespace {

using nlohmann::json;
using models::HeadsConfig;
using models::TransformerConfig;
using detail::HuggingFaceFamily;
using detail::TensorLayout;

// A name rule of the family's table instantiated for one block: full HF name and the attnkit
// parameter name(s).
struct Binding {
  std::string hf;
  std::vector<std::string> ours;
  TensorLayout layout;
};

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

std::vector<Binding> bindings(const HuggingFaceFamily& family, const TransformerConfig& c,
                              const HeadsConfig& h, bool prefixed, int64_t blocks) {
  std::vector<Binding> out;
  for (const auto& rule : family.name_rules(c, h)) {
    const bool per_block = rule.hf.find("{layer}") != std::string::npos;
    const bool base = rule.scope == detail::RuleScope::Base;
    for (int64_t b = 0; b < (per_block ? blocks : 1); ++b) {
      const std::string index = std::to_string(b);
      Binding binding;
      binding.layout = rule.layout;
      binding.hf = (base && prefixed ? family.base_prefix : "") + replace_all(rule.hf, "{layer}", index);
      const std::string ours = (base ? "transformer." : "") + replace_all(rule.ours, "{layer}", index);
      if (rule.layout == TensorLayout::FusedQkv) {
        for (const char* part : {"q", "k", "v"}) binding.ours.push_back(replace_all(ours, "{qkv}", part));
      } else {
        binding.ours.push_back(ours);
      }
      out.push_back(std::move(binding));
    }
  }
  return out;
}

// A tied alias's canonical name in a checkpoint with (or without) the base prefix `prefix`.
std::string canonical_of(const detail::TiedAlias& alias, const std::string& prefix) {
  return alias.canonical[0] == '@' ? prefix + alias.canonical.substr(1) : alias.canonical;
}

std::string shape_string(at::IntArrayRef shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

std::string list_names(const std::vector<std::string>& names, size_t limit = 12) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < limit; ++i) out += (i ? ", " : "") + one_line(names[i]);
  if (names.size() > limit) out += fmt::format(", ... ({} in all)", names.size());
  return out;
}

// ------------------------------------------------------------------------------------------
// config.json

}  // namespace

namespace detail {
const HuggingFaceFamily& detect_family(const json& j) {
  if (!j.is_object()) throw Error("config.json: expected a JSON object");
  if (j.contains("model_type") && j["model_type"].is_string())
    return detail::huggingface_family_named(j["model_type"].get<std::string>());
  if (j.contains("architectures") && j["architectures"].is_array())
    for (const auto& a : j["architectures"]) {
      const auto name = a.is_string() ? a.get<std::string>() : "";
      for (const HuggingFaceFamily* family : detail::huggingface_families())
        for (const auto& prefix : family->architecture_prefixes)
          if (name.rfind(prefix, 0) == 0) return *family;
    }
  std::string prefixes;
  for (const HuggingFaceFamily* family : detail::huggingface_families())
    for (const auto& prefix : family->architecture_prefixes)
      prefixes += (prefixes.empty() ? "" : ", ") + prefix;
  throw Error(fmt::format("config.json: no 'model_type' (and no architectures naming {}; attnkit "
                          "reads {})", prefixes, detail::huggingface_model_types()));
}
}  // namespace detail

namespace {
using detail::detect_family;

// The family a layout names (a table entry; anything else is a caller's error).
const HuggingFaceFamily& layout_family(const HuggingFaceLayout& layout) {
  try {
    return detail::huggingface_family_named(layout.model_type);
  } catch (const Error&) {
    throw Error(fmt::format("Hugging Face layout: model_type {} is not one of {}",
                            detail::quoted(layout.model_type), detail::huggingface_model_types()));
  }
}

}  // namespace

TransformerConfig config_from_huggingface(const json& j, std::string* model_type_out) {
  const HuggingFaceFamily& family = detect_family(j);
  if (family.encoder_decoder)
    throw Error(fmt::format("config.json: model_type '{}' is an encoder-decoder, not a single "
                            "stack (io::load_model reads it as models::EncoderDecoderModel)",
                            family.model_type));
  if (model_type_out) *model_type_out = family.model_type;
  TransformerConfig c = family.config_from_json(j);
  if (j.contains("pruned_heads") && !j["pruned_heads"].is_null())
    c.pruned_heads = models::head_indices_from_json(j["pruned_heads"], "config.json: pruned_heads");
  c.validate();
  return c;
}

json config_to_huggingface(const TransformerConfig& c, const HeadsConfig& h) {
  using detail::require_expressible;
  require_expressible(c.attention.kind == layers::AttentionKind::Softmax && !c.attention.talking_heads &&
                          c.attention.key_size == 0 && c.attention.value_size == 0,
                      c, "HF models use plain softmax attention with key_size = hidden / heads");
  require_expressible(!c.cross_attention && c.condition_size == 0, c,
                      "cross attention and Conditional LayerNorm have no HF equivalent here");
  require_expressible(c.positions == layers::PositionEncoding::Learned, c,
                      "HF models use learned absolute positions");
  const HuggingFaceFamily* family = detail::huggingface_family(c.family);
  require_expressible(family != nullptr, c,
                      fmt::format("family must be one of {}", detail::huggingface_model_types()).c_str());
  json j = family->config_to_json(c, h);
  if (!c.pruned_heads.empty()) j["pruned_heads"] = models::head_indices_to_json(c.pruned_heads);
  j["torch_dtype"] = "float32";
  return j;
}

HuggingFaceLayout default_layout(const TransformerConfig& c, const HeadsConfig& h) {
  HuggingFaceLayout layout;
  const HuggingFaceFamily* family = detail::huggingface_family(c.family);
  layout.model_type = family ? family->model_type : models::model_family_name(c.family);
  layout.prefixed = h.any();  // *ForPreTraining, GPT2LMHeadModel, ...: save_pretrained's names
  return layout;
}

// ------------------------------------------------------------------------------------------
// Loading

namespace {

// Parameters by name; throws if a rule names one the model lacks (a table bug, not user input).
at::Tensor parameter(std::map<std::string, at::Tensor>& params, const std::string& name) {
  auto it = params.find(name);
  if (it == params.end()) throw Error(fmt::format("internal: attnkit has no parameter '{}'", name));
  return it->second;
}

std::vector<int64_t> expected_hf_shape(const Binding& b, std::map<std::string, at::Tensor>& params) {
  auto ours = parameter(params, b.ours[0]).sizes().vec();
  if (b.layout == TensorLayout::Same) return ours;
  if (b.layout == TensorLayout::Transposed) {
    if (ours.size() == 2) std::swap(ours[0], ours[1]);
    return ours;
  }
  // FusedQkv: weight [out, in] x3 -> [in, 3 out]; bias [out] x3 -> [3 out]
  if (ours.size() == 2) return {ours[1], 3 * ours[0]};
  return {3 * ours[0]};
}

void assign(const Binding& b, const at::Tensor& hf, std::map<std::string, at::Tensor>& params) {
  torch::NoGradGuard no_grad;
  auto value = hf.to(at::kFloat);
  switch (b.layout) {
    case TensorLayout::Same: parameter(params, b.ours[0]).copy_(value); break;
    case TensorLayout::Transposed:
      parameter(params, b.ours[0]).copy_(value.dim() == 2 ? value.t() : value);
      break;
    case TensorLayout::FusedQkv: {
      auto parts = (value.dim() == 2 ? value.t() : value).chunk(3, 0);
      for (int i = 0; i < 3; ++i) parameter(params, b.ours[i]).copy_(parts[i]);
      break;
    }
  }
}

at::Tensor hf_value(const Binding& b, std::map<std::string, at::Tensor>& params) {
  switch (b.layout) {
    case TensorLayout::Same: return parameter(params, b.ours[0]).detach().clone();
    case TensorLayout::Transposed: {
      auto p = parameter(params, b.ours[0]).detach();
      return (p.dim() == 2 ? p.t() : p).contiguous();
    }
    case TensorLayout::FusedQkv: {
      auto fused = at::cat({parameter(params, b.ours[0]).detach(), parameter(params, b.ours[1]).detach(),
                            parameter(params, b.ours[2]).detach()}, 0);
      return (fused.dim() == 2 ? fused.t() : fused).contiguous();
    }
  }
  return {};
}

std::string canonical_name(std::string name) {
  // Old TF-converted checkpoints call LayerNorm's parameters gamma and beta.
  static const std::regex gamma(R"(\.gamma$)"), beta(R"(\.beta$)");
  name = std::regex_replace(name, gamma, ".weight");
  return std::regex_replace(name, beta, ".bias");
}

json read_json_file(const std::string& path) {
  const std::string text = read_file(path);
  try {
    return json::parse(text);
  } catch (const std::exception& e) {  // json parse_error, or out_of_range for 1e400
    throw Error(fmt::format("{}: not valid JSON ({})", path, e.what()));
  }
}

// A safetensors file's tensors under their canonical names, for a family's head detection.
class FileContents final : public detail::CheckpointContents {
 public:
  FileContents(const SafetensorsFile& file, const std::map<std::string, std::string>& by_name,
               std::string prefix, std::string path)
      : file_(file), by_name_(by_name), prefix_(std::move(prefix)), path_(std::move(path)) {}
  bool has(const std::string& name) const override { return by_name_.count(name) > 0; }
  bool has_any_with_prefix(const std::string& prefix) const override {
    return std::any_of(by_name_.begin(), by_name_.end(),
                       [&](const auto& kv) { return kv.first.rfind(prefix, 0) == 0; });
  }
  int64_t rows(const std::string& name) const override {
    const TensorEntry& entry = file_.entry(by_name_.at(name));
    if (entry.shape.empty())
      throw Error(fmt::format("{}: tensor '{}' is a scalar, not a matrix", path_, entry.name));
    return entry.shape[0];
  }
  bool same_values(const std::string& a, const std::string& b) const override {
    return file_.tensor(by_name_.at(a)).equal(file_.tensor(by_name_.at(b)));
  }
  std::string base(const std::string& name) const override { return prefix_ + name; }

 private:
  const SafetensorsFile& file_;
  const std::map<std::string, std::string>& by_name_;
  std::string prefix_;
  std::string path_;
};

}  // namespace

namespace detail {

HuggingFaceFiles huggingface_files(const std::string& directory) {
  namespace fs = std::filesystem;
  HuggingFaceFiles files;
  files.config_path = (fs::path(directory) / "config.json").string();
  files.weights_path = (fs::path(directory) / "model.safetensors").string();
  if (!fs::exists(files.config_path)) throw Error(fmt::format("{}: no config.json", directory));
  if (!fs::exists(files.weights_path)) {
    if (fs::exists(fs::path(directory) / "pytorch_model.bin"))
      throw Error(fmt::format("{}: only pytorch_model.bin (pickle) found; attnkit reads "
                              "model.safetensors (convert it with transformers' save_pretrained("
                              "safe_serialization=True))", directory));
    throw Error(fmt::format("{}: no model.safetensors", directory));
  }
  files.config_json = read_json_file(files.config_path);
  return files;
}

Error naming_config_file(const Error& e, const std::string& config_path) {
  // The readers' messages say "config.json: ..."; name the file the user gave (fuzz finding).
  const std::string what = e.what(), prefix = "config.json: ";
  return Error(config_path + ": " + (what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what));
}

}  // namespace detail

models::TaskModel load_huggingface(const std::string& directory, HuggingFaceModel* info_out) {
  detail::HuggingFaceFiles files = detail::huggingface_files(directory);
  const std::string config_path = files.config_path, weights_path = files.weights_path;
  HuggingFaceModel info;
  info.config_json = std::move(files.config_json);
  std::string model_type;
  try {
    info.config = config_from_huggingface(info.config_json, &model_type);
  } catch (const Error& e) {
    throw detail::naming_config_file(e, config_path);
  }
  const HuggingFaceFamily& family = detail::huggingface_family_named(model_type);
  auto& layout = info.layout;
  layout.model_type = model_type;

  auto file = SafetensorsFile::open(weights_path);
  // Canonical name -> name in the file.
  std::map<std::string, std::string> by_name;
  for (const auto& e : file.entries()) {
    const auto canonical = canonical_name(e.name);
    if (!by_name.emplace(canonical, e.name).second)
      throw Error(fmt::format("{}: '{}' appears twice (as gamma/beta and weight/bias)",
                              weights_path, canonical));
  }
  const std::string prefix = family.base_prefix;
  layout.prefixed = std::any_of(by_name.begin(), by_name.end(), [&](const auto& kv) {
    return kv.first.rfind(prefix, 0) == 0;
  });
  const FileContents contents(file, by_name, layout.prefixed ? prefix : "", weights_path);
  auto has = [&](const std::string& name) { return contents.has(name); };
  auto tensor = [&](const std::string& name) { return file.tensor(by_name.at(name)); };

  // Which heads and optional parts the checkpoint holds.
  auto& c = info.config;
  auto& h = info.heads;
  family.detect_heads(contents, info.config_json, c, h);
  if ((h.next_sentence > 0 || (h.sequence_labels > 0 && h.sequence_pooling == models::Pooling::Pooler)) &&
      !c.pooler)
    throw Error(fmt::format("{}: the checkpoint has a classifier over the pooled output but no "
                            "pooler weights", weights_path));

  detail::check_config_fits_weights(c, h, file, config_path);
  models::TaskModel model(c, h);
  model->eval();
  auto params = model->named_parameters(true);
  std::map<std::string, at::Tensor> by_ours;
  for (const auto& item : params) by_ours[item.key()] = item.value();

  std::set<std::string> used;
  std::vector<std::string> missing, mismatched;
  const auto table = bindings(family, c, h, layout.prefixed, model->transformer->block_count());
  for (const auto& b : table) {
    if (!has(b.hf)) {
      missing.push_back(b.hf);
      continue;
    }
    const auto& entry = file.entry(by_name.at(b.hf));
    const auto expected = expected_hf_shape(b, by_ours);
    if (entry.shape != expected) {
      mismatched.push_back(fmt::format("{}: expected {}, got {}", b.hf, shape_string(expected),
                                       shape_string(entry.shape)));
      continue;
    }
    assign(b, file.tensor(entry.name), by_ours);
    used.insert(b.hf);
    if (entry.dtype != "F32") layout.dtypes[b.hf] = entry.dtype;
  }
  // Tied copies and aliases: when present they must repeat their canonical tensor.
  for (const auto& tied : family.tied_aliases(h)) {
    const std::string& alias = tied.alias;
    const std::string canonical = canonical_of(tied, contents.base(""));
    if (!has(alias)) continue;
    if (!has(canonical)) {
      // Only the alias was stored (e.g. cls.predictions.decoder.bias without cls.predictions.bias).
      auto it = std::find(missing.begin(), missing.end(), canonical);
      if (it == missing.end()) continue;
      missing.erase(it);
      for (const auto& b : table)
        if (b.hf == canonical) assign(b, tensor(alias), by_ours);
      layout.alias_only.push_back(canonical);
    }
    used.insert(alias);
    layout.tied_copies.push_back(alias);
    const auto& alias_entry = file.entry(by_name.at(alias));
    if (alias_entry.dtype != "F32") layout.dtypes[alias] = alias_entry.dtype;
  }
  if (!mismatched.empty())
    throw Error(fmt::format("{}: shape mismatch: {}", weights_path, list_names(mismatched, 4)));
  if (!missing.empty())
    throw Error(fmt::format("{}: missing tensors: {}", weights_path, list_names(missing)));
  const std::regex buffer_names(family.buffer_names);
  std::vector<std::string> unknown;
  for (const auto& [canonical, stored] : by_name) {
    if (used.count(canonical)) continue;
    std::string base_name = canonical;
    if (layout.prefixed && base_name.rfind(prefix, 0) == 0) base_name = base_name.substr(prefix.size());
    if (std::regex_match(base_name, buffer_names)) {
      layout.skipped.push_back(stored);
      continue;
    }
    unknown.push_back(stored);
  }
  if (!unknown.empty())
    throw Error(fmt::format("{}: unknown tensors (not part of a {} model attnkit knows): {}",
                            weights_path, model_type, list_names(unknown)));
  if (info_out) *info_out = std::move(info);
  return model;
}

NamedTensors huggingface_tensors(models::TaskModel& model, const HuggingFaceLayout& layout) {
  const auto& c = model->config();
  const auto& h = model->heads();
  std::map<std::string, at::Tensor> by_ours;
  for (const auto& item : model->named_parameters(true)) by_ours[item.key()] = item.value();
  const HuggingFaceFamily& family = layout_family(layout);
  const std::string prefix = layout.prefixed ? family.base_prefix : "";
  std::map<std::string, at::Tensor> out;
  for (const auto& b : bindings(family, c, h, layout.prefixed, model->transformer->block_count()))
    out[b.hf] = hf_value(b, by_ours);
  for (const auto& alias : layout.tied_copies)
    for (const auto& tied : family.tied_aliases(h))
      if (tied.alias == alias) out[alias] = out.at(canonical_of(tied, prefix)).clone();
  for (const auto& canonical : layout.alias_only) out.erase(canonical);
  NamedTensors tensors;
  for (auto& [name, t] : out) {
    auto it = layout.dtypes.find(name);
    if (it != layout.dtypes.end()) {
      const std::map<std::string, at::ScalarType> types{
          {"F64", at::kDouble}, {"F16", at::kHalf}, {"BF16", at::kBFloat16}, {"F32", at::kFloat}};
      auto type = types.find(it->second);
      if (type != types.end()) t = t.to(type->second);
    }
    tensors.emplace_back(name, t);
  }
  return tensors;
}

void save_huggingface(models::TaskModel& model, const HuggingFaceModel& info,
                      const std::string& directory) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(directory, ec);
  if (ec) throw Error(fmt::format("{}: cannot create directory ({})", directory, ec.message()));
  json config = info.config_json.is_null() ? config_to_huggingface(model->config(), model->heads())
                                           : info.config_json;
  // Heads pruned since loading: the config records them as save_pretrained does.
  const auto& pruned = model->config().pruned_heads;
  if (!pruned.empty()) config["pruned_heads"] = models::head_indices_to_json(pruned);
  else if (config.contains("pruned_heads")) config["pruned_heads"] = json::object();
  // HF writes config.json with indent 2 and sorted keys (nlohmann's objects are sorted).
  write_file_atomically((fs::path(directory) / "config.json").string(), config.dump(2) + "\n");
  save_safetensors((fs::path(directory) / "model.safetensors").string(),
                   huggingface_tensors(model, info.layout), {{"format", "pt"}});
}

}  // namespace attnkit::io
