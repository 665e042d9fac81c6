// Stage "heads": Michel, Levy and Neubig (2019) on the ListOps softmax model the training stage
// saved: head importance, single-head and all-but-one ablations, the pruning profile with its
// random and most-important-first baselines, physical pruning of half the heads (checked equal to
// masking them), and the inference speed-up of pruning half the heads of a BERT-base-shaped model
// (bench/heads_bench.cpp, one process per case, as `make bench` runs it).
#include "attnkit/analysis/heads.h"
#include "attnkit/analysis/heads_experiment.h"
#include "attnkit/demo/demo.h"
#include "bench_output.h"
#include "attnkit/error.h"
#include "attnkit/data/listops.h"
#include "attnkit/io/model_directory.h"
#include "attnkit/process.h"
#include "attnkit/progress.h"
#include "attnkit/report/head_plots.h"
#include "attnkit/train/data_tensors.h"
#include "attnkit/train/run_config.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cmath>

namespace attnkit::demo {
namespace {

namespace fs = std::filesystem;

double mean_metric(const analysis::PruningProfile& profile) {
  double sum = 0;
  for (const auto& step : profile.steps) sum += step.metric;
  return profile.steps.empty() ? NAN : sum / static_cast<double>(profile.steps.size());
}

// Tokens per second of one attnkit_bench_heads case (its JSON result line).
double heads_bench_throughput(const fs::path& bench, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {bench.string()};
  argv.insert(argv.end(), args.begin(), args.end());
  const ProcessResult r = run_process(argv);
  if (!r.ok()) throw Error(fmt::format("attnkit_bench_heads failed: {}", first_line(r.err.empty() ? r.out : r.err)));
  return bench_result_line(r.out, "attnkit_bench_heads", "tokens_per_s")["tokens_per_s"].get<double>();
}

}  // namespace

report::Section heads_stage(const StageContext& context) {
  const auto& o = context.options;
  const fs::path run = o.out / "training" / "listops-softmax";
  const fs::path best = run / "checkpoints" / "best" / "model.safetensors";
  if (!fs::exists(best))
    throw Error(fmt::format("no trained ListOps softmax model at {} (run the training stage first)", best.string()));
  train::RunConfig config;
  train::apply_toml_file(config, (run / "config.toml").string());
  auto loaded = io::load_model(best.string());

  // Fresh ListOps expressions with the lengths the model was trained on (another seed than the
  // training and validation splits).
  data::ListOpsOptions listops;
  listops.min_length = config.task.min_length;
  listops.max_length = config.task.max_length;
  const size_t examples = o.quick ? 200 : 1000;
  const auto batch = train::make_listops_batch(data::generate_listops(listops, o.seed * 2 + 7, examples),
                                               config.task.truncate);
  const auto mask = (at::arange(batch.ids.size(1)).unsqueeze(0) < batch.lengths.unsqueeze(1)).to(at::kLong);
  auto task = analysis::classification_task(loaded.task, batch.ids, mask, batch.labels, 50);

  // The experiment of `attnkit analyze heads` (importance, ablations, the three pruning profiles)
  // on these tensors instead of a data file.
  analysis::HeadsExperimentOptions options;
  options.model = best.parent_path().string();
  options.data = fmt::format("{} generated ListOps expressions", examples);
  options.read_data = [&](const std::string&, const std::string&, const io::LoadedModel&) {
    analysis::HeadsInputs inputs;
    inputs.input_ids = batch.ids;
    inputs.attention_mask = mask;
    inputs.labels = batch.labels;
    inputs.label_count = data::ListOpsVocabulary::kNumClasses;
    return inputs;
  };
  options.batch_size = 50;
  options.seed = o.seed;
  const auto experiment = analysis::run_heads_experiment(options, [&](const std::string& unit) {
    ProgressOptions p;
    p.unit = unit;
    p.log_every = 0;
    p.quiet = o.quiet;
    return std::make_unique<ProgressReporter>(p);
  });
  auto heads = experiment.analysis;
  heads.model = fmt::format("the ListOps softmax model of the training stage ({} layers x {} heads, best "
                            "validation checkpoint), on {} fresh ListOps expressions of {}-{} tokens",
                            loaded.config.layers, loaded.config.heads, examples, listops.min_length,
                            listops.max_length);
  const int64_t all_heads = analysis::count_heads(analysis::full_mask(*loaded.transformer));
  auto section = report::heads_section(heads);
  section.headlines.clear();

  const double ascending = mean_metric(heads.profiles[0]), descending = mean_metric(heads.profiles[2]);
  section.headlines.push_back({"mean accuracy over the pruning profile, least important heads first vs most "
                               "important first (the paper: importance order degrades slowest)",
                               fmt::format("{:.1f}% vs {:.1f}%", 100 * ascending, 100 * descending),
                               o.quick ? std::optional<bool>() : std::optional<bool>(ascending >= descending)});

  // Physical pruning of half the heads (least important first) equals masking the same heads.
  const auto prune = analysis::heads_to_prune(*loaded.transformer, heads.importance.importance, 0.5);
  auto gates = analysis::full_mask(*loaded.transformer);
  for (const auto& [layer, list] : prune)
    for (int64_t h : list) gates[layer][h] = 0.0;
  std::vector<at::Tensor> gate_tensors;
  for (const auto& layer : gates) gate_tensors.push_back(torch::tensor(layer, at::kFloat));
  loaded.transformer->set_head_gates(gate_tensors);
  const double masked = task.metric();
  loaded.transformer->set_head_gates({});
  const double unpruned = task.metric();
  loaded.transformer->prune_heads(analysis::to_original_numbering(*loaded.transformer, prune));
  const double removed = task.metric();
  const int64_t kept = analysis::count_heads(analysis::full_mask(*loaded.transformer));
  section.headlines.push_back({fmt::format("accuracy with {} of {} heads physically removed (= the same heads "
                                           "masked: {:.1f}%)",
                                           analysis::count_heads(gates, 0.0), all_heads,
                                           100 * masked),
                               fmt::format("{:.1f}% -> {:.1f}%", 100 * unpruned, 100 * removed),
                               std::abs(removed - masked) <= 1.5 / static_cast<double>(examples)});

  // Inference speed-up of pruning half the heads of every layer (BERT-base shape; quick: small).
  const fs::path bench = o.executable_dir / "attnkit_bench_heads";
  if (!fs::exists(bench))
    throw Error(fmt::format("{} is missing (it is built with attnkit: cmake --build BUILD)", bench.string()));
  const std::vector<std::string> shape =
      o.quick ? std::vector<std::string>{"--layers", "2", "--heads", "4", "--hidden", "128", "--repeats", "2"}
              : std::vector<std::string>{"--layers", "12", "--heads", "12", "--hidden", "768", "--repeats", "3"};
  report::Table speed{"inference throughput (tokens/s, forward without gradients, 2 threads), every layer "
                      "keeping half its heads",
                      {"batch", "n", "unpruned", "50% pruned", "speed-up"}, {}};
  double headline_speedup = NAN;
  for (const auto& [b, n] : std::vector<std::pair<int, int>>{{1, 128}, {16, 128}}) {
    std::vector<std::string> args = shape;
    for (const std::string& a : {std::string("--batch"), std::to_string(b), std::string("--n"), std::to_string(n),
                                 std::string("--threads"), std::string("2")})
      args.push_back(a);
    auto with = [&](const char* fraction) {
      auto a = args;
      a.push_back("--pruned");
      a.push_back(fraction);
      return heads_bench_throughput(bench, a);
    };
    const double full = with("0"), half = with("0.5");
    if (!o.quiet) fmt::print(stderr, "pruning speed-up, batch {} n {}: {:.2f}x\n", b, n, half / full);
    speed.rows.push_back({std::to_string(b), std::to_string(n), fmt::format("{:.0f}", full), fmt::format("{:.0f}", half),
                          fmt::format("{:.2f}x", half / full)});
    headline_speedup = half / full;
  }
  section.headlines.push_back(
      {o.quick ? "inference speed-up from pruning 50% of the heads (small model, batch 16, n = 128)"
               : "inference speed-up from pruning 50% of BERT-base's heads (batch 16, n = 128; the paper: up to "
                 "17.5% on a GPU, attnkit's target +25%)",
       fmt::format("{:.2f}x", headline_speedup),
       o.quick ? std::optional<bool>() : std::optional<bool>(headline_speedup >= 1.25)});
  section.blocks.push_back({fmt::format(
      "Half of the {} heads, least important first, removed physically (rows of Q, K, V and columns of the "
      "output projection; TransformerModel::prune_heads): {} heads remain and the accuracy is the same as with "
      "those heads masked by their gates ({:.1f}% and {:.1f}%). The speed-up is measured on a randomly "
      "initialised {} with the first half of every layer's heads removed (bench/heads_bench.cpp, one process "
      "per case). Michel et al. report that 20% (WMT) to 40% (BERT) of heads can go without a noticeable loss "
      "and up to 17.5% faster inference with half of BERT's heads pruned.",
      all_heads, kept, 100 * removed, 100 * masked,
      o.quick ? "2-layer, width-128, 4-head model" : "BERT-base-shaped model (12 layers, 12 heads, width 768)"),
      {}, {}});
  section.blocks.push_back({{}, speed, {}});
  return section;
}

}  // namespace attnkit::demo
