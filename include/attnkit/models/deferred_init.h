#pragma once
// Building a model whose tensors a loader overwrites next, without the random initialisation it
// overwrites (issue 43 part 5: an instant start).
//
// While a DeferredInit is alive on a thread, every in-place random fill there (`uniform_`,
// `normal_`: torch::nn::Linear's and Embedding's own initialisation, TransformerModel's and the
// task heads' normal_ draws, `randn`) leaves its tensor as allocated, untouched (so its pages are
// not even resident), and every `copy_` records its destination. finish() then initialises
// exactly what the loader did not write: every parameter of the model that no copy_ wrote, and
// every buffer that was drawn at random and not written, with the values today's eager
// construction gives them: when there is any, the model is built once more the eager way from the
// generator state saved when the guard started (so the same seed gives the same values as a
// model built without the guard), and those tensors are copied from it by name. Otherwise the
// default CPU generator is left where it was before the model was built (an eager build would
// have advanced it).
//
// Mechanism: the guard adds the dispatch key CustomRNGKeyId to the thread's included keys; the
// library registers, at that key, no-op kernels for uniform_ / normal_, a recording kernel for
// copy_ and a fallthrough for every other operator.
#include <ATen/core/Tensor.h>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace attnkit::models {

class Model;

class DeferredInit {
 public:
  DeferredInit();
  ~DeferredInit();
  DeferredInit(const DeferredInit&) = delete;
  DeferredInit& operator=(const DeferredInit&) = delete;

  // Ends the guard on `model` (the module built under it and loaded since): initialises what the
  // loader did not write, as above, building the reference with `build` (called without the
  // guard) when needed. Returns the names initialised (empty when the loader wrote everything).
  std::vector<std::string> finish(Model& model, const std::function<std::shared_ptr<Model>()>& build);

  // Makes `target` (a tensor filling its whole storage: a parameter, a buffer) use `source`'s
  // memory instead of its own, where both are CPU tensors of the same dtype and shape, contiguous,
  // each filling its storage; records `target` as written, as a copy_ into it would be. Every
  // tensor sharing target's storage (a tied weight) reads the new memory too; `source`'s storage is
  // left empty, so pass a tensor made for this (SafetensorsFile::shared_tensor: a loader adopts
  // the file's mapped bytes instead of copying them). Returns false, changing nothing, otherwise.
  static bool adopt(const at::Tensor& target, const at::Tensor& source);

  struct State;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace attnkit::models
