#include "attnkit/train/optimizers.h"

#include "attnkit/error.h"

#include <torch/torch.h>

#include <fmt/format.h>

#include <sstream>
#include <unordered_set>

namespace attnkit::train {

std::string to_string(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kAdamW: return "adamw";
    case OptimizerKind::kAdam: return "adam";
    case OptimizerKind::kSgd: return "sgd";
  }
  return "?";
}

OptimizerKind optimizer_kind_from_string(const std::string& name) {
  for (OptimizerKind kind : {OptimizerKind::kAdamW, OptimizerKind::kAdam, OptimizerKind::kSgd}) {
    if (to_string(kind) == name) return kind;
  }
  throw Error(fmt::format("unknown optimizer '{}' (expected adamw, adam or sgd)", name));
}

void OptimizerOptions::validate() const {
  auto check = [](bool ok, const std::string& message) {
    if (!ok) throw Error("optimizer options: " + message);
  };
  check(learning_rate >= 0, fmt::format("learning_rate must be >= 0, got {}", learning_rate));
  check(weight_decay >= 0, fmt::format("weight_decay must be >= 0, got {}", weight_decay));
  check(beta1 >= 0 && beta1 < 1, fmt::format("beta1 must be in [0, 1), got {}", beta1));
  check(beta2 >= 0 && beta2 < 1, fmt::format("beta2 must be in [0, 1), got {}", beta2));
  check(eps > 0, fmt::format("eps must be > 0, got {}", eps));
  check(momentum >= 0 && momentum < 1, fmt::format("momentum must be in [0, 1), got {}", momentum));
  check(!nesterov || momentum > 0, "nesterov needs momentum > 0");
}

bool decays(const at::Tensor& parameter) { return parameter.dim() >= 2; }

namespace {

template <typename Options>
std::vector<torch::optim::OptimizerParamGroup> split_groups(
    const std::vector<at::Tensor>& decaying, const std::vector<at::Tensor>& other,
    const Options& decay_options) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (!decaying.empty()) {
    groups.emplace_back(decaying, std::make_unique<Options>(decay_options));
  }
  if (!other.empty()) {
    auto no_decay = std::make_unique<Options>(decay_options);
    no_decay->weight_decay(0);
    groups.emplace_back(other, std::move(no_decay));
  }
  return groups;
}

// The optimizer's own defaults. LibTorch 2.x (not 1.13) gives a group option that equals the
// options' constructor default (weight_decay 0 for Adam and SGD, 0.01 for AdamW) the optimizer's
// default instead, so the no-decay group of Adam would decay. The defaults therefore carry the
// weight decay of the group whose value is the constructor default; both versions then keep each
// group's own (Optimizers.MatchTorchOptimInPython).
template <typename Options>
Options optimizer_defaults(const Options& decay_options) {
  Options defaults = decay_options;
  if (decay_options.weight_decay() != Options(decay_options.lr()).weight_decay()) defaults.weight_decay(0);
  return defaults;
}

}  // namespace

std::unique_ptr<torch::optim::Optimizer> make_optimizer(torch::nn::Module& module,
                                                        const OptimizerOptions& options) {
  options.validate();
  std::vector<at::Tensor> decaying, other;
  std::unordered_set<const void*> seen;
  for (const at::Tensor& parameter : module.parameters()) {
    // Frozen parameters (a LoRA run's base weights, lora.h) are not optimised.
    if (!parameter.requires_grad() || !seen.insert(parameter.unsafeGetTensorImpl()).second) continue;
    (decays(parameter) ? decaying : other).push_back(parameter);
  }
  if (decaying.empty() && other.empty()) throw Error("make_optimizer: the module has no trainable parameters");
  const auto betas = std::make_tuple(options.beta1, options.beta2);
  switch (options.kind) {
    case OptimizerKind::kAdamW: {
      auto o = torch::optim::AdamWOptions(options.learning_rate)
                   .betas(betas).eps(options.eps).weight_decay(options.weight_decay);
      return std::make_unique<torch::optim::AdamW>(split_groups(decaying, other, o), optimizer_defaults(o));
    }
    case OptimizerKind::kAdam: {
      auto o = torch::optim::AdamOptions(options.learning_rate)
                   .betas(betas).eps(options.eps).weight_decay(options.weight_decay);
      return std::make_unique<torch::optim::Adam>(split_groups(decaying, other, o), optimizer_defaults(o));
    }
    case OptimizerKind::kSgd: {
      auto o = torch::optim::SGDOptions(options.learning_rate)
                   .momentum(options.momentum).nesterov(options.nesterov)
                   .weight_decay(options.weight_decay);
      return std::make_unique<torch::optim::SGD>(split_groups(decaying, other, o), optimizer_defaults(o));
    }
  }
  throw Error("make_optimizer: unknown optimizer kind");
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double learning_rate) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(learning_rate);
}

std::string save_optimizer_state(torch::optim::Optimizer& optimizer) {
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  std::ostringstream bytes;
  archive.save_to(bytes);
  return bytes.str();
}

void load_optimizer_state(torch::optim::Optimizer& optimizer, const std::string& bytes,
                          const std::string& what) {
  try {
    std::istringstream stream(bytes);
    torch::serialize::InputArchive archive;
    archive.load_from(stream);
    optimizer.load(archive);
  } catch (const c10::Error& e) {
    std::string reason = e.what_without_backtrace();
    reason = reason.substr(0, reason.find('\n'));
    throw Error(fmt::format("{}: not an optimizer state for this model and optimizer ({})", what, reason));
  }
}

}  // namespace attnkit::train
