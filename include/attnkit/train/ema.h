#pragma once
// Exponential moving average of a module's parameters (Polyak averaging):
//   shadow = decay · shadow + (1 - decay) · parameter      after every optimiser update.
// Evaluation with the averaged weights swaps them into the module (swap_in) and back (swap_out);
// EmaSwap does both as a scope. Buffers (e.g. running statistics) are not averaged.
#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace attnkit::train {

class ExponentialMovingAverage {
 public:
  // The shadow starts as a copy of the parameters. Throws attnkit::Error unless 0 < decay < 1.
  ExponentialMovingAverage(torch::nn::Module& module, double decay);

  double decay() const { return decay_; }
  void update();  // after an optimiser step; not while swapped in (throws attnkit::Error)

  // Puts the averaged weights into the module, keeping the trained ones aside; swap_out restores
  // them bit-exactly. Each throws attnkit::Error when called twice in a row.
  void swap_in();
  void swap_out();
  bool swapped_in() const { return swapped_in_; }

  // The averaged weights by parameter name (as module.named_parameters()).
  std::vector<std::pair<std::string, at::Tensor>> shadow() const;
  // Restores them (e.g. from a checkpoint). Throws attnkit::Error naming a missing parameter or
  // one whose shape differs.
  void load(const std::map<std::string, at::Tensor>& shadow, const std::string& what);

 private:
  double decay_;
  std::vector<std::pair<std::string, at::Tensor>> parameters_;
  std::vector<at::Tensor> shadow_;
  std::vector<at::Tensor> trained_;  // the trained weights while swapped in
  bool swapped_in_ = false;
};

// Swaps the averaged weights in for the scope (does nothing for a null average).
class EmaSwap {
 public:
  explicit EmaSwap(ExponentialMovingAverage* average);
  ~EmaSwap();
  EmaSwap(const EmaSwap&) = delete;
  EmaSwap& operator=(const EmaSwap&) = delete;

 private:
  ExponentialMovingAverage* average_;
};

}  // namespace attnkit::train
