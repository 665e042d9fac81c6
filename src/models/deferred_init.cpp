// Deferred initialisation while loading: include/attnkit/models/deferred_init.h.
#include "attnkit/models/deferred_init.h"

#include "attnkit/models/model.h"
#include "attnkit/runtime.h"

#include <ATen/Operators.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>
#include <torch/nn/module.h>

#include <mutex>
#include <optional>
#include <set>

namespace attnkit::models {

struct DeferredInit::State {
  std::set<const c10::StorageImpl*> drawn;    // random fills skipped
  std::set<const c10::StorageImpl*> written;  // copy_ destinations
  at::Tensor generator_state;                 // the default CPU generator's, at the start
  std::optional<c10::impl::IncludeDispatchKeyGuard> include;
  // The model's blocks are mappings of their own while it is built and loaded, so that adopt()
  // frees them to the system instead of leaving holes in the heap (attnkit/runtime.h).
  std::optional<LargeBlocksMapped> mapped_blocks;
  State* previous = nullptr;
};

namespace {

constexpr auto kKey = c10::DispatchKey::CustomRNGKeyId;

// The guard of this thread; null on other threads (an intra-op worker inherits the included key
// but not this: there the kernels below do the real work, and a copy_ made there is not
// recorded, which at worst initialises that tensor from the reference build).
thread_local DeferredInit::State* current = nullptr;

c10::DispatchKeySet below(c10::DispatchKeySet keys) {
  return keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, kKey);
}

const c10::StorageImpl* storage_of(const at::Tensor& t) {
  return t.has_storage() ? t.storage().unsafeGetStorageImpl() : nullptr;
}

at::Tensor& skip_uniform(c10::DispatchKeySet keys, at::Tensor& self, double from, double to,
                         c10::optional<at::Generator> generator) {
  if (current == nullptr) return at::_ops::uniform_::redispatch(below(keys), self, from, to, generator);
  current->drawn.insert(storage_of(self));
  return self;
}

at::Tensor& skip_normal(c10::DispatchKeySet keys, at::Tensor& self, double mean, double std,
                        c10::optional<at::Generator> generator) {
  if (current == nullptr) return at::_ops::normal_::redispatch(below(keys), self, mean, std, generator);
  current->drawn.insert(storage_of(self));
  return self;
}

at::Tensor& record_copy(c10::DispatchKeySet keys, at::Tensor& self, const at::Tensor& src,
                        bool non_blocking) {
  if (current != nullptr) current->written.insert(storage_of(self));
  return at::_ops::copy_::redispatch(below(keys), self, src, non_blocking);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, CustomRNGKeyId, m) {
  m.impl("uniform_", TORCH_FN(skip_uniform));
  m.impl("normal_", TORCH_FN(skip_normal));
  m.impl("copy_", TORCH_FN(record_copy));
}

TORCH_LIBRARY_IMPL(_, CustomRNGKeyId, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

DeferredInit::DeferredInit() : state_(std::make_unique<State>()) {
  {
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    state_->generator_state = generator.get_state();
  }
  state_->mapped_blocks.emplace();
  state_->include.emplace(kKey);
  state_->previous = current;
  current = state_.get();
}

DeferredInit::~DeferredInit() {
  if (current == state_.get()) current = state_->previous;
}

std::vector<std::string> DeferredInit::finish(Model& built,
                                              const std::function<std::shared_ptr<Model>()>& build) {
  torch::nn::Module& model = built.module();
  if (current == state_.get()) current = state_->previous;
  state_->include.reset();
  state_->mapped_blocks.reset();
  auto unwritten = [&](const at::Tensor& t) {
    return t.defined() && t.numel() > 0 && !state_->written.count(storage_of(t));
  };
  std::vector<std::string> names;
  for (const auto& item : model.named_parameters(/*recurse=*/true))
    if (unwritten(item.value())) names.push_back(item.key());
  for (const auto& item : model.named_buffers(/*recurse=*/true))
    if (unwritten(item.value()) && state_->drawn.count(storage_of(item.value())))
      names.push_back(item.key());
  if (names.empty()) return names;
  {
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(state_->generator_state);
  }
  const std::shared_ptr<Model> reference = build();
  const auto parameters = reference->module().named_parameters(/*recurse=*/true);
  const auto buffers = reference->module().named_buffers(/*recurse=*/true);
  auto params = model.named_parameters(/*recurse=*/true);
  auto bufs = model.named_buffers(/*recurse=*/true);
  at::NoGradGuard no_grad;
  for (const auto& name : names) {
    at::Tensor* target = params.find(name);
    const at::Tensor* source = parameters.find(name);
    if (target == nullptr) {
      target = bufs.find(name);
      source = buffers.find(name);
    }
    if (source != nullptr && source->sizes() == target->sizes()) target->copy_(*source);
  }
  return names;
}

bool DeferredInit::adopt(const at::Tensor& target, const at::Tensor& source) {
  auto fills_storage = [](const at::Tensor& t) {
    return t.defined() && t.device().is_cpu() && t.has_storage() && t.is_contiguous() &&
           t.storage_offset() == 0 && t.storage().nbytes() == t.nbytes() && t.nbytes() > 0;
  };
  if (!fills_storage(target) || !fills_storage(source) || target.scalar_type() != source.scalar_type() ||
      target.sizes() != source.sizes())
    return false;
  c10::StorageImpl* from = source.storage().unsafeGetStorageImpl();
  at::DataPtr memory = from->set_data_ptr(at::DataPtr(nullptr, source.device()));
  from->set_nbytes(0);
  target.storage().unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(memory));
  if (current != nullptr) current->written.insert(storage_of(target));
  return true;
}

}  // namespace attnkit::models
