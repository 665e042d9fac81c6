#pragma once
// Optimisers for the trainer, built on torch::optim (AdamW, Adam, SGD), with the weight-decay rule
// of the Transformer literature: parameters are split into two groups by shape.
//
// Decay rule: a parameter with 2 or more dimensions (dense and embedding matrices) decays; a
// parameter with fewer (every bias, LayerNorm / Conditional LayerNorm gains and biases, scalars)
// does not. The name is not consulted, so the rule holds for any module.
//   AdamW: decoupled weight decay (p -= lr * weight_decay * p before the Adam update; Loshchilov &
//          Hutter), exactly torch.optim.AdamW.
//   Adam:  torch.optim.Adam; weight_decay is the classic L2 term added to the gradient.
//   SGD:   torch.optim.SGD with momentum (dampening 0, optional Nesterov); weight_decay as L2.
// Group 0 holds the decaying parameters, group 1 the others (weight_decay 0); an empty group is
// left out. The learning rate of both groups is set by set_learning_rate() (the schedule).
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <string>

namespace attnkit::train {

enum class OptimizerKind { kAdamW, kAdam, kSgd };

std::string to_string(OptimizerKind kind);  // "adamw", "adam", "sgd"
// Throws attnkit::Error listing the names for an unknown one.
OptimizerKind optimizer_kind_from_string(const std::string& name);

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kAdamW;
  double learning_rate = 1e-3;  // peak rate; the schedule scales it
  double weight_decay = 0.01;   // on parameters with >= 2 dimensions only
  double beta1 = 0.9;           // Adam(W)
  double beta2 = 0.999;
  double eps = 1e-8;
  double momentum = 0.9;  // SGD
  bool nesterov = false;  // SGD
  // Throws attnkit::Error naming the first bad field (negative rate or decay, betas outside
  // [0, 1), eps <= 0, momentum outside [0, 1), Nesterov without momentum).
  void validate() const;
};

// Whether `parameter` decays under the rule above.
bool decays(const at::Tensor& parameter);

// An optimiser over module.parameters() (shared parameters once), in registration order.
// Throws attnkit::Error for invalid options or a module without parameters.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(torch::nn::Module& module,
                                                        const OptimizerOptions& options);

// Sets the learning rate of every parameter group.
void set_learning_rate(torch::optim::Optimizer& optimizer, double learning_rate);

// The optimiser's state (moments, step counts, momentum buffers) as bytes (a torch archive), and
// back. Tensors round-trip bit-exactly; the parameters are matched by position, so load into an
// optimiser made by make_optimizer for the same module and options. Throws attnkit::Error naming
// `what` (e.g. a file name) for bytes that are not such an archive or do not fit.
std::string save_optimizer_state(torch::optim::Optimizer& optimizer);
void load_optimizer_state(torch::optim::Optimizer& optimizer, const std::string& bytes,
                          const std::string& what);

}  // namespace attnkit::train
