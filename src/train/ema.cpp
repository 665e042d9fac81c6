#include "attnkit/train/ema.h"

#include "attnkit/error.h"

#include <torch/torch.h>

#include <fmt/format.h>

namespace attnkit::train {

ExponentialMovingAverage::ExponentialMovingAverage(torch::nn::Module& module, double decay)
    : decay_(decay) {
  if (!(decay > 0 && decay < 1)) {
    throw Error(fmt::format("EMA decay must be in (0, 1), got {}", decay));
  }
  torch::NoGradGuard no_grad;
  for (const auto& item : module.named_parameters()) {
    parameters_.emplace_back(item.key(), item.value());
    shadow_.push_back(item.value().detach().clone());
  }
}

void ExponentialMovingAverage::update() {
  if (swapped_in_) throw Error("EMA update while the averaged weights are swapped in");
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < shadow_.size(); ++i) {
    shadow_[i].mul_(decay_).add_(parameters_[i].second.detach(), 1.0 - decay_);
  }
}

void ExponentialMovingAverage::swap_in() {
  if (swapped_in_) throw Error("EMA weights are already swapped in");
  torch::NoGradGuard no_grad;
  trained_.clear();
  for (size_t i = 0; i < shadow_.size(); ++i) {
    at::Tensor& parameter = parameters_[i].second;
    trained_.push_back(parameter.detach().clone());
    parameter.copy_(shadow_[i]);
  }
  swapped_in_ = true;
}

void ExponentialMovingAverage::swap_out() {
  if (!swapped_in_) throw Error("EMA weights are not swapped in");
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < shadow_.size(); ++i) parameters_[i].second.copy_(trained_[i]);
  trained_.clear();
  swapped_in_ = false;
}

std::vector<std::pair<std::string, at::Tensor>> ExponentialMovingAverage::shadow() const {
  std::vector<std::pair<std::string, at::Tensor>> result;
  for (size_t i = 0; i < shadow_.size(); ++i) result.emplace_back(parameters_[i].first, shadow_[i]);
  return result;
}

void ExponentialMovingAverage::load(const std::map<std::string, at::Tensor>& shadow,
                                    const std::string& what) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < shadow_.size(); ++i) {
    const std::string& name = parameters_[i].first;
    auto found = shadow.find(name);
    if (found == shadow.end()) throw Error(fmt::format("{}: no averaged weights for '{}'", what, name));
    if (found->second.sizes() != shadow_[i].sizes()) {
      throw Error(fmt::format("{}: '{}' has shape {}, the model's is {}", what, name,
                              c10::str(found->second.sizes()), c10::str(shadow_[i].sizes())));
    }
    shadow_[i].copy_(found->second);
  }
}

EmaSwap::EmaSwap(ExponentialMovingAverage* average) : average_(average) {
  if (average_) average_->swap_in();
}

EmaSwap::~EmaSwap() {
  if (average_ && average_->swapped_in()) average_->swap_out();
}

}  // namespace attnkit::train
