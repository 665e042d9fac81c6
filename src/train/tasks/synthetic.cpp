// copy, reverse, sort, recall: the synthetic sequence tasks (synthetic_tasks.h) as a causal LM
// that predicts the target part.
#include "task_common.h"

#include "attnkit/data/synthetic_tasks.h"
#include "attnkit/train/data_tensors.h"

namespace attnkit::train::detail {

std::unique_ptr<TrainingTask> make_synthetic(const RunConfig& config) {
  const auto& t = config.task;
  data::SyntheticTaskOptions options;
  options.task = data::synthetic_task_from_string(t.name);
  options.min_length = t.min_length;
  options.max_length = t.max_length;
  options.num_symbols = t.symbols;
  options.num_values = t.symbols;
  options.num_keys = std::max<int64_t>(options.num_keys, t.max_length);
  auto rows = [&](uint64_t seed, int64_t count) {
    std::vector<LmRow> out;
    for (const auto& e : data::generate_synthetic_task(options, seed, count)) {
      auto batch = make_synthetic_batch({e});
      auto in = batch.inputs[0], target = batch.targets[0];
      out.push_back({Ids(in.data_ptr<int64_t>(), in.data_ptr<int64_t>() + in.numel()),
                     Ids(target.data_ptr<int64_t>(), target.data_ptr<int64_t>() + target.numel())});
    }
    return out;
  };
  auto train = rows(config.trainer.seed * 2 + 1, t.train_examples);
  auto val = rows(config.trainer.seed * 2 + 2, t.eval_examples);
  int64_t longest = 1;
  for (const auto* set : {&train, &val})
    for (const auto& r : *set) longest = std::max<int64_t>(longest, r.input.size());
  models::HeadsConfig heads;
  heads.causal_lm = true;
  auto model = build_model(config, data::synthetic_vocab_size(options), longest, true, heads);
  return std::make_unique<LanguageModelTask>(model, config, std::move(train), std::move(val),
                                             data::SyntheticVocabulary::kPad, true);
}

}  // namespace attnkit::train::detail
