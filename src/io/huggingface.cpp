// The one Hugging Face loader and saver (io/huggingface.h), generic over the family records of
// hf_family.h: which stacks a family's checkpoints hold decides the model built (a TaskModel for
// one stack, an EncoderDecoderModel for an encoder and a decoder); names, layouts, tied aliases,
// skipped buffers, head detection and the way pruned heads are stored come from the record.
#include "attnkit/io/huggingface.h"

#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/io/atomic_file.h"
#include "attnkit/io/safetensors.h"
#include "attnkit/models/deferred_init.h"
#include "hf_family.h"
#include "model_size_check.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <regex>
#include <set>

namespace attnkit::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using models::HeadsConfig;
using models::TransformerConfig;
using detail::HeadPruning;
using detail::HuggingFaceConfig;
using detail::HuggingFaceFamily;
using detail::Stack;
using detail::TensorLayout;

constexpr const char* kPrunedKey = "attnkit_pruned_heads";
const char* const kSites[] = {"encoder.self", "decoder.self", "decoder.cross"};

// ------------------------------------------------------------------------------------------
// config.json

// The config of a family that stores pruned heads in config.json: its one stack's. A family that
// stores them at full size refuses "pruned_heads" and checks "attnkit_pruned_heads" (applied
// after loading).
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

// config.json -> the model `family` reads from it, pruned heads recorded (InConfig) or checked
// (Zeroed), validated. Throws attnkit::Error "config.json: ...".
HuggingFaceConfig read_config(const HuggingFaceFamily& family, const json& j) {
  const bool zeroed = family.pruning == HeadPruning::Zeroed;
  if (family.pruning != HeadPruning::InConfig && j.contains("pruned_heads") && !j["pruned_heads"].is_null() &&
      !(j["pruned_heads"].is_object() && j["pruned_heads"].empty()))
    throw Error(fmt::format("config.json: 'pruned_heads' is not supported for {} (transformers cannot "
                            "prune its heads; attnkit writes '{}')", family.model_type, kPrunedKey));
  HuggingFaceConfig c = family.config_from_json(j);
  if (!family.encoder_decoder()) c.stack.family = models::ModelFamily::named(family.model_type);
  if (zeroed) pruned_from_json(j);
  else if (j.contains("pruned_heads") && !j["pruned_heads"].is_null())
    c.stack.pruned_heads = models::head_indices_from_json(j["pruned_heads"], "config.json: pruned_heads");
  if (family.encoder_decoder()) c.encoder_decoder.validate();
  else c.stack.validate();
  return c;
}

// The one-stack family named `name`, or nullptr.
const HuggingFaceFamily* one_stack_family_named(const std::string& name) {
  for (const HuggingFaceFamily* family : detail::huggingface_families())
    if (name == family->model_type && !family->encoder_decoder()) return family;
  return nullptr;
}

// The family a layout names for `model` (a table entry whose stacks are the model's; anything
// else is a caller's error).
const HuggingFaceFamily& layout_family(const HuggingFaceLayout& layout, const models::Model& model) {
  const HuggingFaceFamily* family = nullptr;
  try {
    family = &detail::huggingface_family_named(layout.model_type);
  } catch (const Error&) {
    throw Error(fmt::format("Hugging Face layout: model_type {} is not one of {}",
                            detail::quoted(layout.model_type), detail::huggingface_model_types()));
  }
  const bool encoder_decoder = model.shape() == models::ModelShape::EncoderDecoder;
  if (family->encoder_decoder() != encoder_decoder)
    throw Error(fmt::format("Hugging Face layout: model_type '{}' is {}an encoder-decoder family", family->model_type,
                            encoder_decoder ? "not " : ""));
  return *family;
}

// The model's config as the records take it.
HuggingFaceConfig config_of(models::Model& model) {
  HuggingFaceConfig c;
  if (model.shape() == models::ModelShape::EncoderDecoder) {
    c.encoder_decoder = model.encoder_decoder("writing the Hugging Face layout").config();
  } else {
    auto& task = model.task_model("writing the Hugging Face layout");
    c.stack = task.config();
    c.heads = task.heads();
  }
  return c;
}

// A fresh config.json (and its layout) for a model read from no Hugging Face directory:
// `layout.model_type`'s family when given, else a one-stack model's own family, else the first
// encoder-decoder family of the table that can express the model (the first one's refusal when
// none can).
json fresh_config(models::Model& model, const HuggingFaceConfig& c, HuggingFaceLayout& layout) {
  if (model.shape() != models::ModelShape::EncoderDecoder) {
    json config = config_to_huggingface(c.stack, c.heads);
    if (layout.model_type.empty()) layout = default_layout(c.stack, c.heads);
    return config;
  }
  const HuggingFaceFamily* chosen = nullptr;
  json config;
  if (!layout.model_type.empty()) {
    chosen = &layout_family(layout, model);
    config = chosen->config_to_json(c);
  } else {
    std::optional<Error> first_refusal;
    for (const HuggingFaceFamily* family : detail::huggingface_families()) {
      if (!family->encoder_decoder()) continue;
      try {
        config = family->config_to_json(c);
        chosen = family;
        break;
      } catch (const Error& e) {
        if (!first_refusal) first_refusal = e;
      }
    }
    if (!chosen) throw *first_refusal;
  }
  config["torch_dtype"] = "float32";
  layout.model_type = chosen->model_type;
  layout.prefixed = true;  // save_pretrained's names for *ForConditionalGeneration / MarianMTModel
  return config;
}

// ------------------------------------------------------------------------------------------
// Name tables instantiated for one model

// A rule bound to one model: the full HF name (canonical: LayerNorm weight/bias, with the base
// prefix when the checkpoint has it) and attnkit's tensor name(s).
struct Binding {
  std::string hf;
  std::vector<std::string> ours;
  TensorLayout layout = TensorLayout::Same;
  bool optional = false;
  std::string stack_prefix;                             // "transformer.", "encoder.", ... ("" for heads)
  const TransformerConfig* stack_config = nullptr;      // its stack's config (pruned heads)
};

// The name under which `root` holds `stack`, with a trailing dot.
std::string module_prefix(const torch::nn::Module& root, const models::TransformerModel& stack) {
  for (const auto& child : root.named_children())
    if (child.value().get() == static_cast<const torch::nn::Module*>(stack.ptr().get())) return child.key() + ".";
  throw Error("internal: a layer stack that is not a child of its model");
}

std::vector<Binding> bindings(const HuggingFaceFamily& family, const HuggingFaceConfig& config,
                              const models::Model& model, const std::string& hf_prefix) {
  std::vector<Binding> out;
  for (const auto& rule : family.name_rules(config)) {
    Binding proto;
    proto.layout = rule.layout;
    proto.optional = rule.optional;
    int64_t blocks = 1;
    if (rule.stack != Stack::Heads) {
      const auto site = model.attention_site(rule.stack == Stack::Decoder ? "decoder.self" : "encoder.self");
      proto.stack_prefix = module_prefix(model.module(), site.stack);
      proto.stack_config = &site.stack->config();
      blocks = site.stack->block_count();
    }
    const bool per_block = rule.hf.find("{layer}") != std::string::npos;
    for (int64_t b = 0; b < (per_block ? blocks : 1); ++b) {
      const std::string index = std::to_string(b);
      Binding binding = proto;
      binding.hf = (rule.stack != Stack::Heads ? hf_prefix : "") + detail::replace_all(rule.hf, "{layer}", index);
      const std::string ours = proto.stack_prefix + detail::replace_all(rule.ours, "{layer}", index);
      if (rule.layout == TensorLayout::FusedQkv) {
        for (const char* part : {"q", "k", "v"}) binding.ours.push_back(detail::replace_all(ours, "{qkv}", part));
      } else if (rule.layout == TensorLayout::RowBlocks) {
        for (const auto& part : rule.parts) binding.ours.push_back(detail::replace_all(ours, "{part}", part));
      } else {
        binding.ours.push_back(ours);
      }
      out.push_back(std::move(binding));
    }
  }
  return out;
}

// A tied alias's name in a checkpoint with (or without) the base prefix `prefix`.
std::string with_prefix(const std::string& name, const std::string& prefix) {
  return name[0] == '@' ? prefix + name.substr(1) : name;
}

// The model's parameters and buffers by name.
std::map<std::string, at::Tensor> tensors_by_name(torch::nn::Module& model) {
  std::map<std::string, at::Tensor> out;
  for (const auto& item : model.named_parameters(true)) out[item.key()] = item.value();
  for (const auto& item : model.named_buffers(true)) out[item.key()] = item.value();
  return out;
}

// Tensors by name; throws if a rule names one the model lacks (a table bug, not user input).
at::Tensor tensor_named(std::map<std::string, at::Tensor>& tensors, const std::string& name) {
  auto it = tensors.find(name);
  if (it == tensors.end()) throw Error(fmt::format("internal: attnkit has no tensor '{}'", name));
  return it->second;
}

std::vector<int64_t> expected_hf_shape(const Binding& b, std::map<std::string, at::Tensor>& tensors) {
  auto ours = tensor_named(tensors, b.ours[0]).sizes().vec();
  if (b.layout == TensorLayout::Same) return ours;
  if (b.layout == TensorLayout::Transposed) {
    if (ours.size() == 2) std::swap(ours[0], ours[1]);
    return ours;
  }
  if (b.layout == TensorLayout::RowBlocks) {
    for (size_t i = 1; i < b.ours.size(); ++i) ours[0] += tensor_named(tensors, b.ours[i]).size(0);
    return ours;
  }
  // FusedQkv: weight [out, in] x3 -> [in, 3 out]; bias [out] x3 -> [3 out]
  if (ours.size() == 2) return {ours[1], 3 * ours[0]};
  return {3 * ours[0]};
}

void assign(const Binding& b, const at::Tensor& hf, std::map<std::string, at::Tensor>& tensors) {
  torch::NoGradGuard no_grad;
  auto value = hf.to(at::kFloat);
  switch (b.layout) {
    case TensorLayout::Same: tensor_named(tensors, b.ours[0]).copy_(value); break;
    case TensorLayout::Transposed:
      tensor_named(tensors, b.ours[0]).copy_(value.dim() == 2 ? value.t() : value);
      break;
    case TensorLayout::FusedQkv: {
      auto parts = (value.dim() == 2 ? value.t() : value).chunk(3, 0);
      for (int i = 0; i < 3; ++i) tensor_named(tensors, b.ours[i]).copy_(parts[i]);
      break;
    }
    case TensorLayout::RowBlocks: {
      int64_t row = 0;
      for (const auto& name : b.ours) {
        at::Tensor target = tensor_named(tensors, name);
        target.copy_(value.narrow(0, row, target.size(0)));
        row += target.size(0);
      }
      break;
    }
  }
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

// Our tensor `name` of binding `b` as a family that stores pruned heads at full size writes it:
// a pruned attention projection expanded with zeros.
at::Tensor full_size(const Binding& b, const std::string& name, const at::Tensor& ours) {
  static const std::regex attention(R"(^blocks\.(\d+)\.(attention|cross_attention)\.([qkvo])\.(weight|bias)$)");
  std::smatch m;
  const std::string relative = name.substr(b.stack_prefix.size());
  if (!b.stack_config || !std::regex_match(relative, m, attention)) return ours;
  const models::HeadIndices& pruned =
      m[2] == "attention" ? b.stack_config->pruned_heads : b.stack_config->pruned_cross_heads;
  auto it = pruned.find(std::stoll(m[1]));
  if (it == pruned.end() || it->second.empty()) return ours;
  const bool output = m[3] == "o";
  if (output && m[4] == "bias") return ours;  // the output bias is not per head
  return unpruned(ours, output ? 1 : 0, b.stack_config->heads, it->second);
}

at::Tensor hf_value(const Binding& b, std::map<std::string, at::Tensor>& tensors, bool zeroed) {
  std::vector<at::Tensor> parts;
  for (const auto& name : b.ours) {
    auto t = tensor_named(tensors, name).detach();
    parts.push_back(zeroed ? full_size(b, name, t) : t);
  }
  switch (b.layout) {
    case TensorLayout::Same: return parts[0].contiguous().clone();
    case TensorLayout::Transposed: return (parts[0].dim() == 2 ? parts[0].t() : parts[0]).contiguous();
    case TensorLayout::FusedQkv: {
      auto fused = at::cat(parts, 0);
      return (fused.dim() == 2 ? fused.t() : fused).contiguous();
    }
    case TensorLayout::RowBlocks: return at::cat(parts, 0).contiguous();
  }
  return {};
}

std::string canonical_name(std::string name) {
  // Old TF-converted checkpoints call LayerNorm's parameters gamma and beta.
  static const std::regex gamma(R"(\.gamma$)"), beta(R"(\.beta$)");
  name = std::regex_replace(name, gamma, ".weight");
  return std::regex_replace(name, beta, ".bias");
}

std::string list_names(const std::vector<std::string>& names, size_t limit = 12) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < limit; ++i) out += (i ? ", " : "") + one_line(names[i]);
  if (names.size() > limit) out += fmt::format(", ... ({} in all)", names.size());
  return out;
}

json read_json_file(const std::string& path) {
  const std::string text = read_file(path);
  try {
    return json::parse(text);
  } catch (const std::exception& e) {  // json parse_error, or out_of_range for 1e400
    throw Error(fmt::format("{}: not valid JSON ({})", path, e.what()));
  }
}

// A config reader's "config.json: WHAT" error as "CONFIG_PATH: WHAT".
Error naming_config_file(const Error& e, const std::string& config_path) {
  // The readers' messages say "config.json: ..."; name the file the user gave (fuzz finding).
  const std::string what = e.what(), prefix = "config.json: ";
  return Error(config_path + ": " + (what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what));
}

// A checkpoint's tensors under their canonical names, for a family's head detection.
class FileContents final : public detail::CheckpointContents {
 public:
  FileContents(const CheckpointTensors& file, const std::map<std::string, std::string>& by_name,
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
  const CheckpointTensors& file_;
  const std::map<std::string, std::string>& by_name_;
  std::string prefix_;
  std::string path_;
};

}  // namespace

// ------------------------------------------------------------------------------------------
// config.json, public

TransformerConfig config_from_huggingface(const json& j, std::string* model_type_out) {
  const HuggingFaceFamily& family = detail::detect_family(j);
  if (family.encoder_decoder())
    throw Error(fmt::format("config.json: model_type '{}' is an encoder-decoder, not a single "
                            "stack (io::load_model reads it as models::EncoderDecoderModel)",
                            family.model_type));
  if (model_type_out) *model_type_out = family.model_type;
  return read_config(family, j).stack;
}

bool is_huggingface_encoder_decoder(const json& config_json) {
  try {
    return detail::detect_family(config_json).encoder_decoder();
  } catch (const Error&) {
    return false;
  }
}

models::EncoderDecoderConfig encoder_decoder_config_from_huggingface(const json& j, std::string* model_type) {
  const HuggingFaceFamily& family = detail::detect_family(j);
  if (!family.encoder_decoder())
    throw Error(fmt::format("config.json: model_type '{}' is not an encoder-decoder", family.model_type));
  if (model_type) *model_type = family.model_type;
  return read_config(family, j).encoder_decoder;
}

json config_to_huggingface(const TransformerConfig& c, const HeadsConfig& h) {
  using detail::require_expressible;
  require_expressible(c.attention.kind == layers::AttentionKind::Softmax && !c.attention.talking_heads,
                      c, "HF models use plain softmax attention");
  require_expressible(c.layer_attention_specs.empty(), c,
                      "HF models have one attention kind in every layer (not a hybrid)");
  require_expressible(!c.cross_attention && c.condition_size == 0, c,
                      "cross attention and Conditional LayerNorm have no HF equivalent here");
  // The Llama families (rotary positions) check their own switches (hf_llama.cpp).
  require_expressible(c.rotary || (c.attention.key_size == 0 && c.attention.value_size == 0), c,
                      "HF models of the BERT and GPT-2 families have key_size = hidden / heads");
  require_expressible(c.rotary || c.positions == layers::PositionEncoding::Learned, c,
                      "HF models of the BERT and GPT-2 families use learned absolute positions");
  const HuggingFaceFamily* family = one_stack_family_named(c.family.name());
  require_expressible(family != nullptr, c,
                      fmt::format("family must be one of {}", detail::huggingface_model_types()).c_str());
  json j = family->config_to_json({c, h});
  if (!c.pruned_heads.empty()) j["pruned_heads"] = models::head_indices_to_json(c.pruned_heads);
  j["torch_dtype"] = "float32";
  return j;
}

HuggingFaceLayout default_layout(const TransformerConfig& c, const HeadsConfig& h) {
  HuggingFaceLayout layout;
  layout.model_type = c.family.name();
  layout.prefixed = h.any();  // *ForPreTraining, GPT2LMHeadModel, ...: save_pretrained's names
  return layout;
}

const char* next_sentence_output_name(const models::ModelFamily& family) {
  const HuggingFaceFamily* record = one_stack_family_named(family.name());
  return record ? record->next_sentence_output : HuggingFaceFamily{}.next_sentence_output;
}

// ------------------------------------------------------------------------------------------
// Loading

namespace {

// One safetensors file.
class SingleFile final : public CheckpointTensors {
 public:
  explicit SingleFile(const std::string& path) : file_(SafetensorsFile::open(path)) {}
  const std::vector<TensorEntry>& entries() const override { return file_.entries(); }
  const TensorEntry& entry(const std::string& name) const override { return file_.entry(name); }
  at::Tensor tensor(const std::string& name) const override { return file_.tensor(name); }
  void read_into(const std::string& name, const std::function<void(const at::Tensor&)>& use) const override {
    file_.read_into(name, use);
  }
  at::Tensor shared_tensor(const std::string& name) const override { return file_.shared_tensor(name); }
  const std::string& path() const override { return file_.path(); }

 private:
  SafetensorsFile file_;
};

// The shards of model.safetensors.index.json.
class ShardedFiles final : public CheckpointTensors {
 public:
  explicit ShardedFiles(const std::string& index_path) : path_(index_path) {
    const json index = read_json_file(index_path);
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      throw Error(fmt::format("{}: no \"weight_map\" object", index_path));
    std::map<std::string, size_t> shard_of_file;
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
      if (!it->is_string())
        throw Error(fmt::format("{}: weight_map: {} is not a file name", index_path, one_line(it.key())));
      const std::string file = it->get<std::string>();
      if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..")
        throw Error(fmt::format("{}: weight_map: shard '{}' is not a plain file name", index_path,
                                one_line(file)));
      auto found = shard_of_file.find(file);
      if (found == shard_of_file.end()) {
        found = shard_of_file.emplace(file, shards_.size()).first;
        shards_.push_back(SafetensorsFile::open((fs::path(index_path).parent_path() / file).string()));
      }
      shard_of_tensor_[it.key()] = found->second;
    }
    // Every tensor of every shard is in the map, in the shard the map names.
    for (size_t i = 0; i < shards_.size(); ++i)
      for (const auto& e : shards_[i].entries()) {
        auto it = shard_of_tensor_.find(e.name);
        if (it == shard_of_tensor_.end() || it->second != i)
          throw Error(fmt::format("{}: tensor '{}' of {} is not mapped to that shard", index_path,
                                  one_line(e.name), shards_[i].path()));
        entries_.push_back(e);
      }
    for (const auto& [name, shard] : shard_of_tensor_)
      if (!shards_[shard].contains(name))
        throw Error(fmt::format("{}: tensor '{}' is not in {}", index_path, one_line(name),
                                shards_[shard].path()));
  }
  const std::vector<TensorEntry>& entries() const override { return entries_; }
  const TensorEntry& entry(const std::string& name) const override { return shard(name).entry(name); }
  at::Tensor tensor(const std::string& name) const override { return shard(name).tensor(name); }
  void read_into(const std::string& name, const std::function<void(const at::Tensor&)>& use) const override {
    shard(name).read_into(name, use);
  }
  at::Tensor shared_tensor(const std::string& name) const override { return shard(name).shared_tensor(name); }
  const std::string& path() const override { return path_; }

 private:
  const SafetensorsFile& shard(const std::string& name) const {
    auto it = shard_of_tensor_.find(name);
    if (it == shard_of_tensor_.end())
      throw Error(fmt::format("{}: no tensor '{}'", path_, one_line(name)));
    return shards_[it->second];
  }
  std::string path_;
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, size_t> shard_of_tensor_;
  std::vector<TensorEntry> entries_;
};

class InMemory final : public CheckpointTensors {
 public:
  InMemory(std::map<std::string, at::Tensor> tensors, std::string path)
      : tensors_(std::move(tensors)), path_(std::move(path)) {
    for (const auto& [name, t] : tensors_) {
      TensorEntry e;
      e.name = name;
      e.scalar_type = t.scalar_type();
      e.dtype = t.scalar_type() == at::kFloat ? "F32" : t.scalar_type() == at::kHalf ? "F16"
                : t.scalar_type() == at::kBFloat16 ? "BF16" : t.scalar_type() == at::kDouble ? "F64" : "?";
      e.shape = t.sizes().vec();
      entries_.push_back(std::move(e));
    }
  }
  const std::vector<TensorEntry>& entries() const override { return entries_; }
  const TensorEntry& entry(const std::string& name) const override {
    for (const auto& e : entries_)
      if (e.name == name) return e;
    throw Error(fmt::format("{}: no tensor '{}'", path_, one_line(name)));
  }
  at::Tensor tensor(const std::string& name) const override {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) throw Error(fmt::format("{}: no tensor '{}'", path_, one_line(name)));
    return it->second;
  }
  const std::string& path() const override { return path_; }

 private:
  std::map<std::string, at::Tensor> tensors_;
  std::string path_;
  std::vector<TensorEntry> entries_;
};

}  // namespace

std::unique_ptr<CheckpointTensors> open_safetensors_checkpoint(const std::string& directory) {
  const fs::path single = fs::path(directory) / "model.safetensors";
  const fs::path index = fs::path(directory) / "model.safetensors.index.json";
  if (fs::exists(single)) return std::make_unique<SingleFile>(single.string());
  if (fs::exists(index)) return std::make_unique<ShardedFiles>(index.string());
  if (fs::exists(fs::path(directory) / "pytorch_model.bin"))
    throw Error(fmt::format("{}: only pytorch_model.bin (pickle) found; attnkit reads "
                            "model.safetensors (convert it with transformers' save_pretrained("
                            "safe_serialization=True))", directory));
  throw Error(fmt::format("{}: no model.safetensors (nor model.safetensors.index.json)", directory));
}

std::unique_ptr<CheckpointTensors> memory_checkpoint(std::map<std::string, at::Tensor> tensors,
                                                     std::string path) {
  return std::make_unique<InMemory>(std::move(tensors), std::move(path));
}

std::shared_ptr<models::Model> load_huggingface(const std::string& directory, HuggingFaceModel* info_out) {
  const std::string config_path = (fs::path(directory) / "config.json").string();
  if (!fs::exists(config_path)) throw Error(fmt::format("{}: no config.json", directory));
  const auto file = open_safetensors_checkpoint(directory);
  return load_huggingface_checkpoint(read_json_file(config_path), config_path, *file, info_out);
}

std::shared_ptr<models::Model> load_huggingface_checkpoint(const json& config_json,
                                                           const std::string& config_path,
                                                           const CheckpointTensors& file,
                                                           HuggingFaceModel* info_out) {
  const std::string& weights_path = file.path();
  HuggingFaceModel info;
  info.config_json = config_json;
  const HuggingFaceFamily* found = nullptr;
  HuggingFaceConfig config;
  std::map<std::string, models::HeadIndices> pruned;  // Zeroed families: pruned after loading
  try {
    found = &detail::detect_family(info.config_json);
    config = read_config(*found, info.config_json);
    if (found->pruning == HeadPruning::Zeroed) pruned = pruned_from_json(info.config_json);
  } catch (const Error& e) {
    throw naming_config_file(e, config_path);
  }
  const HuggingFaceFamily& family = *found;
  HuggingFaceLayout& layout = info.layout;
  layout.model_type = family.model_type;

  // Canonical name -> name in the file.
  std::map<std::string, std::string> by_name;
  for (const auto& e : file.entries()) {
    const auto canonical = canonical_name(e.name);
    if (!by_name.emplace(canonical, e.name).second)
      throw Error(fmt::format("{}: '{}' appears twice (as gamma/beta and weight/bias)",
                              weights_path, canonical));
  }
  const std::string base_prefix = family.base_prefix;
  layout.prefixed = std::any_of(by_name.begin(), by_name.end(), [&](const auto& kv) {
    return kv.first.rfind(base_prefix, 0) == 0;
  });
  const std::string prefix = layout.prefixed ? base_prefix : "";
  const FileContents contents(file, by_name, prefix, weights_path);
  auto has = [&](const std::string& name) { return contents.has(name); };

  // Which heads and optional parts the checkpoint holds.
  if (family.detect_heads) family.detect_heads(contents, info.config_json, config);
  const TransformerConfig& c = config.stack;
  const HeadsConfig& h = config.heads;
  if ((h.next_sentence > 0 || (h.sequence_labels > 0 && h.sequence_pooling == models::Pooling::Pooler)) &&
      !c.pooler)
    throw Error(fmt::format("{}: the checkpoint has a classifier over the pooled output but no "
                            "pooler weights", weights_path));

  if (family.encoder_decoder()) {
    const auto& e = config.encoder_decoder;
    detail::check_config_fits_weights({{e.encoder, {}}, {e.decoder, {}}}, file.entries(),
                                      weights_path, config_path);
  } else {
    detail::check_config_fits_weights({{c, h}}, file.entries(), weights_path, config_path);
  }
  auto build = [&]() -> std::shared_ptr<models::Model> {
    if (family.encoder_decoder()) return models::EncoderDecoderModel(config.encoder_decoder).ptr();
    return models::TaskModel(c, h).ptr();
  };
  // Built without the random initialisation the checkpoint overwrites; what it lacks (an
  // optional tensor) gets the model's own initialisation in deferred.finish below.
  models::DeferredInit deferred;
  std::shared_ptr<models::Model> model = build();
  model->module().eval();
  auto ours = tensors_by_name(model->module());

  const auto table = bindings(family, config, *model, prefix);
  const auto aliases = family.tied_aliases(config);
  std::set<std::string> used, served_by_alias;
  std::vector<std::string> missing, mismatched;
  for (const auto& b : table) {
    std::string stored = b.hf;
    if (!has(stored)) {
      // Only a tied copy was stored (e.g. cls.predictions.decoder.bias without
      // cls.predictions.bias, encoder.embed_tokens.weight without shared.weight).
      for (const auto& a : aliases)
        if (with_prefix(a.canonical, prefix) == b.hf && has(with_prefix(a.alias, prefix))) {
          stored = with_prefix(a.alias, prefix);
          layout.alias_only.push_back(b.hf);
          served_by_alias.insert(b.hf);
          break;
        }
    }
    if (!has(stored)) {
      if (!b.optional) missing.push_back(b.hf);
      continue;
    }
    const auto& entry = file.entry(by_name.at(stored));
    const auto expected = expected_hf_shape(b, ours);
    if (entry.shape != expected) {
      mismatched.push_back(fmt::format("{}: expected [{}], got [{}]", stored, fmt::join(expected, ", "),
                                       fmt::join(entry.shape, ", ")));
      continue;
    }
    // A float32 tensor stored as the model holds it becomes the parameter's memory (the file's
    // private mapping, copy-on-write); anything else is converted or rearranged into it.
    if (b.layout != TensorLayout::Same ||
        !models::DeferredInit::adopt(tensor_named(ours, b.ours[0]), file.shared_tensor(entry.name)))
      file.read_into(entry.name, [&](const at::Tensor& stored_tensor) { assign(b, stored_tensor, ours); });
    used.insert(stored);
    if (entry.dtype != "F32") layout.dtypes[stored] = entry.dtype;
  }
  // Tied copies: written back on saving from their canonical tensor.
  for (const auto& a : aliases) {
    const std::string alias = with_prefix(a.alias, prefix), canonical = with_prefix(a.canonical, prefix);
    if (!has(alias) || (!has(canonical) && !served_by_alias.count(canonical))) continue;
    used.insert(alias);
    layout.tied_copies.push_back(alias);
    const auto& entry = file.entry(by_name.at(alias));
    if (entry.dtype != "F32") layout.dtypes[alias] = entry.dtype;
  }
  if (!mismatched.empty())
    throw Error(fmt::format("{}: shape mismatch: {}", weights_path, list_names(mismatched, 4)));
  if (!missing.empty())
    throw Error(fmt::format("{}: missing tensors: {}", weights_path, list_names(missing)));
  deferred.finish(*model, [&] {
    auto reference = build();
    reference->module().eval();
    return reference;
  });
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
                            weights_path, family.model_type, list_names(unknown)));
  for (const char* site : kSites) {
    auto it = pruned.find(site);
    if (it == pruned.end() || it->second.empty()) continue;
    try {
      model->prune_heads(site, it->second);
    } catch (const Error& e) {
      throw Error(fmt::format("{}: {}: {}", config_path, kPrunedKey, e.what()));
    }
  }
  if (!family.encoder_decoder()) {
    info.config = c;
    info.heads = h;
  }
  if (info_out) *info_out = std::move(info);
  return model;
}

// ------------------------------------------------------------------------------------------
// Saving

NamedTensors huggingface_tensors(models::Model& model, const HuggingFaceLayout& layout) {
  const HuggingFaceFamily& family = layout_family(layout, model);
  const HuggingFaceConfig config = config_of(model);
  const std::string prefix = layout.prefixed ? family.base_prefix : "";
  auto ours = tensors_by_name(model.module());
  std::map<std::string, at::Tensor> out;
  for (const auto& b : bindings(family, config, model, prefix))
    out[b.hf] = hf_value(b, ours, family.pruning == HeadPruning::Zeroed);
  const auto aliases = family.tied_aliases(config);
  for (const auto& alias : layout.tied_copies)
    for (const auto& a : aliases)
      if (with_prefix(a.alias, prefix) == alias) out[alias] = out.at(with_prefix(a.canonical, prefix)).clone();
  for (const auto& canonical : layout.alias_only) out.erase(canonical);
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

void save_huggingface(models::Model& model, const HuggingFaceModel& info, const std::string& directory) {
  HuggingFaceLayout layout = info.layout;
  const HuggingFaceConfig c = config_of(model);
  json config = info.config_json.is_null() ? fresh_config(model, c, layout) : info.config_json;
  const HeadPruning pruning = layout_family(layout, model).pruning;
  if (pruning == HeadPruning::Shrunk) {
    // The pruned size as the config's head counts, when every layer is pruned alike.
    int64_t heads = -1, kv_heads = -1;
    bool alike = true, pruned = false;
    for (const auto& site : model.attention_sites()) {
      for (int64_t layer = 0; layer < site.stack->config().layers; ++layer) {
        const auto attention = site.stack->attention(layer, site.attention);
        pruned = pruned || !attention->pruned_heads().empty();
        const int64_t kv = attention->grouped() ? attention->kv_heads() : attention->heads();
        if (heads < 0) heads = attention->heads(), kv_heads = kv;
        alike = alike && attention->heads() == heads && kv == kv_heads && attention->uniform_groups();
      }
    }
    if (pruned && (!alike || heads <= 0))
      throw Error(fmt::format("cannot write this pruned {} model as a Hugging Face directory: its layers "
                              "keep different numbers of query or key/value heads, or uneven groups "
                              "(transformers has one count for every layer); save it in attnkit's "
                              "format (--format attnkit)", c.stack.family.name()));
    if (pruned) {
      const auto& spec = c.stack.attention;
      config["num_attention_heads"] = heads;
      config["num_key_value_heads"] = kv_heads;
      config["head_dim"] = spec.key_size > 0 ? spec.key_size : c.stack.hidden / c.stack.heads;
    }
  } else if (pruning == HeadPruning::InConfig) {
    // Heads pruned since loading: the config records them as save_pretrained does.
    if (!c.stack.pruned_heads.empty()) config["pruned_heads"] = models::head_indices_to_json(c.stack.pruned_heads);
    else if (config.contains("pruned_heads")) config["pruned_heads"] = json::object();
  } else {
    json pruned = json::object();
    for (const auto& site : model.attention_sites()) {
      const auto& stack = site.stack->config();
      const auto& heads = site.attention == models::AttentionSite::Cross ? stack.pruned_cross_heads : stack.pruned_heads;
      if (!heads.empty()) pruned[site.name] = models::head_indices_to_json(heads);
    }
    if (!pruned.empty()) config[kPrunedKey] = pruned;
    else config.erase(kPrunedKey);
  }
  // Checked before anything is written.
  NamedTensors tensors = huggingface_tensors(model, layout);
  std::error_code ec;
  fs::create_directories(directory, ec);
  if (ec) throw Error(fmt::format("{}: cannot create directory ({})", directory, ec.message()));
  // HF writes config.json with indent 2 and sorted keys (nlohmann's objects are sorted).
  write_file_atomically((fs::path(directory) / "config.json").string(), config.dump(2) + "\n");
  // The reference layout: a directory loaded and saved back is the same file, byte for byte.
  save_safetensors((fs::path(directory) / "model.safetensors").string(), tensors, {{"format", "pt"}});
}

}  // namespace attnkit::io
