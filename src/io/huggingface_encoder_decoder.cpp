// Loading and saving the encoder-decoder families of the Hugging Face table (Marian, BART) as
// models::EncoderDecoderModel (io/huggingface.h). Generic over the records' EncoderDecoderFamily
// hooks (hf_family.h): names, tied aliases and skipped buffers come from the family.
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

namespace fs = std::filesystem;
using detail::EncoderDecoderFamily;
using detail::HuggingFaceFamily;
using detail::RuleScope;
using models::EncoderDecoderConfig;
using nlohmann::json;

constexpr const char* kPrunedKey = "attnkit_pruned_heads";
const char* const kSites[] = {"encoder.self", "decoder.self", "decoder.cross"};

// One rule instantiated: the HF name (with the prefix when the checkpoint has it) and ours.
struct Binding {
  std::string hf, ours;
};

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

std::string with_prefix(const std::string& name, const std::string& prefix) {
  return name[0] == '@' ? prefix + name.substr(1) : name;
}

std::vector<Binding> bindings(const EncoderDecoderFamily& hooks, const EncoderDecoderConfig& c,
                              const std::string& prefix) {
  std::vector<Binding> out;
  for (const auto& rule : hooks.name_rules(c)) {
    const std::string hf = (rule.scope == RuleScope::Base ? prefix : "") + rule.hf;
    if (rule.hf.find("{layer}") == std::string::npos) {
      out.push_back({hf, rule.ours});
      continue;
    }
    const int64_t layers = rule.hf.rfind("decoder.", 0) == 0 ? c.decoder.layers : c.encoder.layers;
    for (int64_t l = 0; l < layers; ++l)
      out.push_back({replace_all(hf, "{layer}", std::to_string(l)),
                     replace_all(rule.ours, "{layer}", std::to_string(l))});
  }
  return out;
}

const HuggingFaceFamily& encoder_decoder_family(const std::string& model_type) {
  const HuggingFaceFamily& family = detail::huggingface_family_named(model_type);
  if (!family.encoder_decoder)
    throw Error(fmt::format("Hugging Face layout: model_type '{}' is not an encoder-decoder family",
                            model_type));
  return family;
}

// The model's parameters and buffers by name.
std::map<std::string, at::Tensor> tensors_by_name(models::EncoderDecoderModelImpl& model) {
  std::map<std::string, at::Tensor> out;
  for (const auto& item : model.named_parameters(true)) out[item.key()] = item.value();
  for (const auto& item : model.named_buffers(true)) out[item.key()] = item.value();
  return out;
}

std::string list_names(const std::vector<std::string>& names, size_t limit = 12) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < limit; ++i) out += (i ? ", " : "") + one_line(names[i]);
  if (names.size() > limit) out += fmt::format(", ... ({} in all)", names.size());
  return out;
}

// attnkit_pruned_heads of a config.json: {site: {layer: [heads]}}.
std::map<std::string, models::HeadIndices> pruned_from_json(const json& j) {
  std::map<std::string, models::HeadIndices> out;
  if (!j.contains(kPrunedKey) || j[kPrunedKey].is_null()) return out;
  const json& by_site = j[kPrunedKey];
  if (!by_site.is_object())
    throw Error(fmt::format("config.json: '{}' must be an object of sites", kPrunedKey));
  for (auto it = by_site.begin(); it != by_site.end(); ++it) {
    if (std::find(std::begin(kSites), std::end(kSites), it.key()) == std::end(kSites))
      throw Error(fmt::format("config.json: {}: unknown site {} (sites: encoder.self, "
                              "decoder.self, decoder.cross)", kPrunedKey, detail::quoted(it.key())));
    out[it.key()] = models::head_indices_from_json(*it, std::string("config.json: ") + kPrunedKey + ": " + it.key());
  }
  return out;
}

json pruned_to_json(const models::EncoderDecoderConfig& c) {
  json j = json::object();
  const models::HeadIndices* lists[] = {&c.encoder.pruned_heads, &c.decoder.pruned_heads,
                                        &c.decoder.pruned_cross_heads};
  for (size_t s = 0; s < 3; ++s)
    if (!lists[s]->empty()) j[kSites[s]] = models::head_indices_to_json(*lists[s]);
  return j;
}

// `t` (rows or, for the output projection, columns of the kept heads) at its unpruned size,
// the removed heads' slices zero.
at::Tensor unpruned(const at::Tensor& t, int64_t dim, int64_t heads, const std::vector<int64_t>& removed) {
  const int64_t kept = heads - static_cast<int64_t>(removed.size());
  if (kept <= 0 || t.size(dim) % kept != 0) return t;
  const int64_t size = t.size(dim) / kept;
  std::vector<int64_t> shape = t.sizes().vec();
  shape[dim] = heads * size;
  at::Tensor full = at::zeros(shape, t.options());
  int64_t j = 0;
  for (int64_t h = 0; h < heads; ++h) {
    if (std::binary_search(removed.begin(), removed.end(), h)) continue;
    full.narrow(dim, h * size, size).copy_(t.narrow(dim, j * size, size));
    ++j;
  }
  return full;
}

// The value HF stores for our tensor `name` (pruned attention projections expanded).
at::Tensor hf_value(const std::string& name, const at::Tensor& ours, const EncoderDecoderConfig& c) {
  static const std::regex attention(R"(^(encoder|decoder)\.blocks\.(\d+)\.(attention|cross_attention)\.([qkvo])\.(weight|bias)$)");
  std::smatch m;
  at::Tensor value = ours.detach();
  if (!std::regex_match(name, m, attention)) return value.clone();
  const models::TransformerConfig& stack = m[1] == "encoder" ? c.encoder : c.decoder;
  const models::HeadIndices& pruned = m[3] == "attention" ? stack.pruned_heads : stack.pruned_cross_heads;
  auto it = pruned.find(std::stoll(m[2]));
  if (it == pruned.end() || it->second.empty()) return value.clone();
  const bool output = m[4] == "o";
  if (output && m[5] == "bias") return value.clone();  // the output bias is not per head
  return unpruned(value, output ? 1 : 0, stack.heads, it->second).contiguous();
}

}  // namespace

bool is_huggingface_encoder_decoder(const json& config_json) {
  try {
    return detail::detect_family(config_json).encoder_decoder != nullptr;
  } catch (const Error&) {
    return false;
  }
}

EncoderDecoderConfig encoder_decoder_config_from_huggingface(const json& j, std::string* model_type) {
  const HuggingFaceFamily& family = detail::detect_family(j);
  if (!family.encoder_decoder)
    throw Error(fmt::format("config.json: model_type '{}' is not an encoder-decoder", family.model_type));
  if (model_type) *model_type = family.model_type;
  if (j.contains("pruned_heads") && !j["pruned_heads"].is_null() &&
      !(j["pruned_heads"].is_object() && j["pruned_heads"].empty()))
    throw Error(fmt::format("config.json: 'pruned_heads' is not supported for {} (transformers cannot "
                            "prune its heads; attnkit writes '{}')", family.model_type, kPrunedKey));
  EncoderDecoderConfig c = family.encoder_decoder->config_from_json(j);
  pruned_from_json(j);  // checked here, applied after loading
  c.validate();
  return c;
}

models::EncoderDecoderModel load_huggingface_encoder_decoder(const std::string& directory,
                                                             HuggingFaceModel* info_out) {
  detail::HuggingFaceFiles files = detail::huggingface_files(directory);
  const std::string config_path = files.config_path, weights_path = files.weights_path;
  HuggingFaceModel info;
  info.config_json = std::move(files.config_json);
  std::string model_type;
  EncoderDecoderConfig config;
  std::map<std::string, models::HeadIndices> pruned;
  try {
    config = encoder_decoder_config_from_huggingface(info.config_json, &model_type);
    pruned = pruned_from_json(info.config_json);
  } catch (const Error& e) {
    throw detail::naming_config_file(e, config_path);
  }
  const HuggingFaceFamily& family = encoder_decoder_family(model_type);
  const EncoderDecoderFamily& hooks = *family.encoder_decoder;
  HuggingFaceLayout& layout = info.layout;
  layout.model_type = model_type;

  auto file = SafetensorsFile::open(weights_path);
  const std::string base_prefix = family.base_prefix;
  std::set<std::string> names;
  for (const auto& e : file.entries()) names.insert(e.name);
  layout.prefixed = std::any_of(names.begin(), names.end(),
                                [&](const std::string& n) { return n.rfind(base_prefix, 0) == 0; });
  const std::string prefix = layout.prefixed ? base_prefix : "";
  detail::check_config_fits_weights({{config.encoder, {}}, {config.decoder, {}}}, file, config_path);

  models::EncoderDecoderModel model(config);
  model->eval();
  auto ours = tensors_by_name(*model);
  const auto table = bindings(hooks, config, prefix);
  const auto aliases = hooks.tied_aliases(config);
  std::set<std::string> used, alias_sources;
  std::vector<std::string> missing, mismatched;
  torch::NoGradGuard no_grad;
  for (const auto& b : table) {
    auto target = ours.find(b.ours);
    if (target == ours.end()) throw Error(fmt::format("internal: attnkit has no tensor '{}'", b.ours));
    std::string stored = b.hf;
    if (!names.count(stored)) {
      // Only a tied copy was stored (e.g. encoder.embed_tokens.weight without shared.weight).
      for (const auto& a : aliases)
        if (with_prefix(a.canonical, prefix) == b.hf && names.count(with_prefix(a.alias, prefix))) {
          stored = with_prefix(a.alias, prefix);
          layout.alias_only.push_back(b.hf);
          alias_sources.insert(stored);
          break;
        }
    }
    if (!names.count(stored)) {
      // transformers itself starts a missing final_logits_bias at zeros.
      if (b.ours != "final_logits_bias") missing.push_back(b.hf);
      continue;
    }
    const auto& entry = file.entry(stored);
    if (entry.shape != target->second.sizes().vec()) {
      mismatched.push_back(fmt::format("{}: expected [{}], got [{}]", stored,
                                       fmt::join(target->second.sizes(), ", "), fmt::join(entry.shape, ", ")));
      continue;
    }
    target->second.copy_(file.tensor(stored).to(at::kFloat));
    used.insert(stored);
    if (entry.dtype != "F32") layout.dtypes[stored] = entry.dtype;
  }
  for (const auto& a : aliases) {
    const std::string alias = with_prefix(a.alias, prefix);
    if (!names.count(alias)) continue;
    if (!alias_sources.count(alias)) layout.tied_copies.push_back(alias);
    used.insert(alias);
    const auto& entry = file.entry(alias);
    if (entry.dtype != "F32") layout.dtypes[alias] = entry.dtype;
  }
  if (!mismatched.empty())
    throw Error(fmt::format("{}: shape mismatch: {}", weights_path, list_names(mismatched, 4)));
  if (!missing.empty()) throw Error(fmt::format("{}: missing tensors: {}", weights_path, list_names(missing)));
  const std::regex buffers(hooks.buffer_names);
  std::vector<std::string> unknown;
  for (const auto& name : names) {
    if (used.count(name)) continue;
    const std::string base = !prefix.empty() && name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
    if (std::regex_match(base, buffers)) {
      layout.skipped.push_back(name);
      continue;
    }
    unknown.push_back(name);
  }
  if (!unknown.empty())
    throw Error(fmt::format("{}: unknown tensors (not part of a {} model attnkit knows): {}",
                            weights_path, model_type, list_names(unknown)));
  for (const char* site : kSites) {
    auto it = pruned.find(site);
    if (it == pruned.end() || it->second.empty()) continue;
    try {
      model->prune_heads(site, it->second);
    } catch (const Error& e) {
      throw Error(fmt::format("{}: {}: {}", config_path, kPrunedKey, e.what()));
    }
  }
  if (info_out) *info_out = std::move(info);
  return model;
}

NamedTensors huggingface_encoder_decoder_tensors(models::EncoderDecoderModelImpl& model,
                                                 const HuggingFaceLayout& layout) {
  const HuggingFaceFamily& family = encoder_decoder_family(layout.model_type);
  const EncoderDecoderFamily& hooks = *family.encoder_decoder;
  const EncoderDecoderConfig& c = model.config();
  const std::string prefix = layout.prefixed ? family.base_prefix : "";
  auto ours = tensors_by_name(model);
  std::map<std::string, at::Tensor> out;
  for (const auto& b : bindings(hooks, c, prefix)) {
    auto it = ours.find(b.ours);
    if (it == ours.end()) throw Error(fmt::format("internal: attnkit has no tensor '{}'", b.ours));
    out[b.hf] = hf_value(b.ours, it->second, c);
  }
  for (const auto& alias : layout.tied_copies)
    for (const auto& a : hooks.tied_aliases(c))
      if (with_prefix(a.alias, prefix) == alias) out[alias] = out.at(with_prefix(a.canonical, prefix)).clone();
  for (const auto& canonical : layout.alias_only)
    for (const auto& a : hooks.tied_aliases(c))
      if (with_prefix(a.canonical, prefix) == canonical && out.count(canonical)) {
        out[with_prefix(a.alias, prefix)] = out.at(canonical);
        out.erase(canonical);
        break;
      }
  NamedTensors tensors;
  const std::map<std::string, at::ScalarType> types{
      {"F64", at::kDouble}, {"F16", at::kHalf}, {"BF16", at::kBFloat16}, {"F32", at::kFloat}};
  for (auto& [name, t] : out) {
    auto it = layout.dtypes.find(name);
    if (it != layout.dtypes.end()) {
      auto type = types.find(it->second);
      if (type != types.end()) t = t.to(type->second);
    }
    tensors.emplace_back(name, t);
  }
  return tensors;
}

void save_huggingface_encoder_decoder(models::EncoderDecoderModelImpl& model,
                                      const HuggingFaceModel& info, const std::string& directory) {
  std::error_code ec;
  fs::create_directories(directory, ec);
  if (ec) throw Error(fmt::format("{}: cannot create directory ({})", directory, ec.message()));
  HuggingFaceLayout layout = info.layout;
  json config = info.config_json;
  if (config.is_null()) {
    if (layout.model_type.empty()) layout.model_type = "marian";
    const HuggingFaceFamily& family = encoder_decoder_family(layout.model_type);
    config = family.encoder_decoder->config_to_json(model.config());
    config["torch_dtype"] = "float32";
    layout.prefixed = true;  // save_pretrained's names for *ForConditionalGeneration / MarianMTModel
  }
  const json pruned = pruned_to_json(model.config());
  if (!pruned.empty()) config[kPrunedKey] = pruned;
  else config.erase(kPrunedKey);
  write_file_atomically((fs::path(directory) / "config.json").string(), config.dump(2) + "\n");
  save_safetensors((fs::path(directory) / "model.safetensors").string(),
                   huggingface_encoder_decoder_tensors(model, layout), {{"format", "pt"}});
}

}  // namespace attnkit::io
