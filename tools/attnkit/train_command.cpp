// attnkit train / attnkit eval / attnkit data listops: the trainer (include/attnkit/train) on the
// command line. A run directory holds config.toml (the resolved settings), metrics.jsonl and
// checkpoints/; see docs/training.md.
#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/io/atomic_file.h"
#include "attnkit/metrics/stats.h"
#include "attnkit/models/model.h"
#include "attnkit/models/quantize.h"
#include "attnkit/train/checkpoint.h"
#include "attnkit/train/distributed.h"
#include "attnkit/data/listops.h"
#include "attnkit/train/run_config.h"
#include "attnkit/train/tasks.h"
#include "attnkit/train/trainer.h"
#include "command.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <unistd.h>

namespace attnkit::cli {
namespace {

namespace fs = std::filesystem;

struct TrainArguments {
  std::string config_file;
  std::string resume;
  int nproc = 1;
  std::map<std::string, std::string> overrides;  // "section.key" -> value from the command line
};

// Registers --section.key for every setting; values land in `overrides`.
void add_setting_flags(CLI::App* cmd, std::shared_ptr<TrainArguments> args) {
  for (const auto& s : train::run_settings()) {
    const std::string name = s.section + "." + s.key;
    cmd->add_option_function<std::string>(
           s.flag(), [args, name](const std::string& v) { args->overrides[name] = v; }, s.help)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)  // a later flag wins
        ->group(s.section == "run" ? "Run" : "Settings ([" + s.section + "] in the TOML file)");
  }
}

// The tasks of --task.name, a few lines each, from the task registry.
std::string task_help() {
  size_t width = 0;
  for (const auto& t : train::task_registry()) width = std::max(width, t.name.size());
  std::string out = "Tasks (--task.name; see docs/training.md):\n";
  for (const auto& t : train::task_registry()) {
    out += fmt::format("  {:<{}}  {}\n", t.name, width, t.help);
    std::string needs;
    if (t.data == train::TaskData::kRequired) needs = "task.data: " + t.files;
    if (t.data == train::TaskData::kOptional) needs = "task.data (else generated): " + t.files;
    if (t.tokenizer) needs += ", task.tokenizer";
    if (t.test_split) needs += "; has a test split";
    if (!needs.empty()) out += fmt::format("  {:<{}}    {}\n", "", width, needs);
  }
  return out;
}

train::RunConfig resolve(const TrainArguments& args, const GlobalOptions& global) {
  train::RunConfig config;
  config.trainer.seed = global.seed;
  if (!args.resume.empty()) {
    const auto saved = (fs::path(args.resume) / "config.toml").string();
    if (!fs::exists(saved))
      throw Error(fmt::format("--resume {}: no config.toml (not an attnkit run directory)", args.resume));
    train::apply_toml_file(config, saved);
  } else if (!args.config_file.empty()) {
    train::apply_toml_file(config, args.config_file);
  }
  for (const auto& [name, value] : args.overrides) {
    const auto dot = name.find('.');
    train::apply_setting(config, name.substr(0, dot), name.substr(dot + 1), value);
  }
  if (!args.resume.empty()) config.directory = args.resume;
  config.trainer.run_directory = config.directory;
  config.trainer.quiet = global.quiet;
  return config;
}

int run_train(const TrainArguments& args, const GlobalOptions& global) {
  // `--nproc N` without a rank in the environment: become the launcher of N local workers that
  // run this same command line (without --nproc), each finding its rank in the environment.
  if (args.nproc > 1 && !train::distributed_environment_from_env()) {
    train::LaunchOptions launch;
    launch.nproc = args.nproc;
    launch.argv = {"/proc/self/exe"};
    char self[4096];
    const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len > 0) launch.argv[0] = std::string(self, len);
    // The workers run the same command line; WORLD_SIZE in their environment makes them workers.
    for (size_t i = 1; i < global.argv.size(); ++i) launch.argv.push_back(global.argv[i]);
    train::launch_local_workers(launch);
    return 0;
  }
  auto config = resolve(args, global);
  std::unique_ptr<train::DataParallel> data_parallel;
  if (auto env = train::distributed_environment_from_env(); env && env->world_size > 1)
    data_parallel = std::make_unique<train::DataParallel>(*env);
  const bool writer = !data_parallel || data_parallel->rank() == 0;
  auto task = train::make_task(config);
  train::Trainer trainer(*task, config.trainer, data_parallel.get());
  if (!args.resume.empty()) {
    const auto step = trainer.resume(args.resume);
    if (writer && !global.quiet) fmt::print(stderr, "resuming {} at step {}\n", args.resume, step);
  } else if (writer && !config.directory.empty()) {
    fs::create_directories(config.directory);
    io::write_file_atomically((fs::path(config.directory) / "config.toml").string(),
                              train::to_toml(config));
  }
  auto result = trainer.train();
  if (writer && !global.quiet) {
    std::string metrics;
    for (const auto& [k, v] : result.last_metrics) metrics += fmt::format(" {}={:.4f}", k, v);
    fmt::print("done: step {}, last training loss {:.4f}; validation:{}; {:.1f} CPU s of training steps\n",
               result.steps, result.last_loss, metrics, result.cpu_seconds);
  }
  return 0;
}

struct EvalArguments {
  std::string run;
  std::string split = "val";
  int64_t examples = -1;  // -1: the run's task.eval_examples
  std::string checkpoint = "newest";  // newest | best | step-N | a checkpoint directory
  std::string items;                  // --items: write the evaluation's per-item statistics here
  std::string baseline;               // --paired-bs: a baseline's per-item statistics (from --items)
  metrics::PairedBootstrapOptions bootstrap;
  std::string json;                   // --json: the paired bootstrap's result
  std::string compute_type = "float32";  // --compute-type: int8 quantizes the loaded model
};

nlohmann::json read_json(const std::string& path) {
  nlohmann::json parsed = nlohmann::json::parse(read_file(path), nullptr, false);
  if (parsed.is_discarded()) throw Error(fmt::format("{}: not JSON", path));
  return parsed;
}

// The per-item statistics of the evaluation just run; Error when the task has none.
metrics::ItemStatistics evaluation_items(const train::Trainer& trainer, const train::RunConfig& config) {
  auto items = trainer.evaluation_items();
  if (!items)
    throw Error(fmt::format("eval --items / --paired-bs: task '{}' gives no per-item statistics (the lm and mlm "
                            "tasks give each block's perplexity, the classification tasks each example's accuracy)",
                            config.task.name));
  return *items;
}

// The same data gives every item the same count (tokens, or a sentence's length) on both sides.
void check_same_data(const metrics::ItemStatistics& items, const metrics::ItemStatistics& baseline,
                     const std::string& what, const char* baseline_side, const char* items_side) {
  if (items.metric == baseline.metric && items.width == baseline.width && items.items() == baseline.items() &&
      items.metric != metrics::SummedMetric::kBleu)
    for (size_t i = 0; i < items.items(); ++i)
      if (items.values[i * items.width + 1] != baseline.values[i * items.width + 1])
        throw Error(fmt::format("{}: item {} counts {} {} and {} {}: not the same data", what, i,
                                baseline.values[i * items.width + 1], baseline_side,
                                items.values[i * items.width + 1], items_side));
}

// The paired bootstrap's lines (and --json's file) of eval --paired-bs and compare.
void print_paired(const metrics::PairedBootstrap& r, const char* a_name, const char* b_name,
                  const std::string& json_path) {
  auto line = [](const std::string& name, const metrics::BootstrapEstimate& e) {
    fmt::print("  {:<18} {:10.4f} (mean {:.4f} ± {:.4f}, 95% [{:.4f}, {:.4f}])\n", name, e.score, e.mean,
               e.half_width, e.interval.low, e.interval.high);
  };
  fmt::print("paired bootstrap, {} over {} items ({} resamples, seed {}):\n", metrics::metric_name(r.metric),
             r.items, r.samples, r.seed);
  line(a_name, r.a);
  line(b_name, r.b);
  line(fmt::format("{} - {}", a_name, b_name), r.difference);
  fmt::print("  p = {:.4f}: {}\n", r.p_value, metrics::verdict(r, a_name, b_name).text);
  if (!json_path.empty())
    io::write_file_atomically(json_path, metrics::result_json(r, a_name, b_name).dump(2) + "\n");
}

int run_eval(const EvalArguments& eval, const GlobalOptions& global) {
  const std::string& run_directory = eval.run;
  TrainArguments args;
  args.resume = run_directory;
  // The baseline is read and checked before the model is built.
  std::optional<metrics::ItemStatistics> baseline;
  if (!eval.baseline.empty()) {
    const nlohmann::json file = read_json(eval.baseline);
    baseline = metrics::item_statistics_from_json(file, eval.baseline);
    if (file.contains("split") && file["split"] != eval.split)
      throw Error(fmt::format("--paired-bs {}: items of the {} split, this evaluation is of the {} split",
                              eval.baseline, file["split"].dump(), eval.split));
  }
  auto config = resolve(args, global);
  // lm, mlm and plm hold out every 20th block of the training text for validation, at most
  // task.eval_examples of them: another count would move blocks between the two (score blocks the
  // run trained on, or leave some out).
  const auto& name = config.task.name;
  if (eval.split == "val" && eval.examples >= 0 && eval.examples != config.task.eval_examples &&
      (name == "lm" || name == "mlm" || name == "plm"))
    throw Error(fmt::format("eval --examples {}: task '{}' held out its validation blocks from the training text "
                            "by task.eval_examples ({} in this run), so another count would score blocks it "
                            "trained on or drop some; leave --examples out (or use --split test)",
                            eval.examples, name, config.task.eval_examples));
  config.trainer.quiet = true;
  config.task.eval_split = eval.split;
  if (eval.examples >= 0) config.task.eval_examples = eval.examples;
  auto task = train::make_task(config);
  train::Trainer trainer(*task, config.trainer);
  // Weights only, and nothing in the run directory changes, so a run can be evaluated while it
  // trains (resume would remove the checkpoint being written).
  const auto checkpoints_directory = std::filesystem::path(run_directory) / "checkpoints";
  std::filesystem::path path;
  int64_t step = 0;
  if (eval.checkpoint == "init") {
    // The model the run started from (its model.init, loaded when the task built the model): a
    // fine-tuning run's teacher or baseline, scored on the same data as its checkpoints.
    if (config.model.init.empty())
      throw Error(fmt::format("--checkpoint init: run {} has no model.init (it trained from scratch)", run_directory));
    path = config.model.init;
  } else if (eval.checkpoint == "newest") {
    const auto checkpoints = train::list_checkpoints(checkpoints_directory.string());
    if (checkpoints.empty())
      throw Error(fmt::format("{}: no complete checkpoint to evaluate", checkpoints_directory.string()));
    path = checkpoints.back().path;
  } else {
    path = checkpoints_directory / eval.checkpoint;
    if (!std::filesystem::is_directory(path)) path = eval.checkpoint;
    if (!std::filesystem::is_directory(path))
      throw Error(fmt::format("--checkpoint {}: neither {} nor {} is a checkpoint directory", eval.checkpoint,
                              (checkpoints_directory / eval.checkpoint).string(), eval.checkpoint));
  }
  if (eval.checkpoint != "init") step = trainer.load_weights(path.string());
  if (eval.compute_type == "int8") {
    // The checkpoint's weights quantized as `generate --compute-type int8` quantizes them (every
    // attention and feed-forward layer and the LM head; models/quantize.h), nothing saved.
    const auto model = task->trained_model();
    if (!model) throw Error("eval --compute-type int8: this task's model cannot be quantized");
    models::quantize_model(*model, layers::ComputeType::Int8);
    models::pack_int8_model(*model);
  }
  const auto metrics = trainer.evaluate();
  fmt::print("step {} split {}", step, eval.split);
  if (eval.compute_type != "float32") fmt::print(" compute {}", eval.compute_type);
  for (const auto& [k, v] : metrics) fmt::print(" {}={:.6g}", k, v);
  fmt::print("\n");
  if (eval.items.empty() && !baseline) return 0;
  const auto items = evaluation_items(trainer, config);
  if (!eval.items.empty()) {
    nlohmann::json out = metrics::item_statistics_json(items);
    out["run"] = run_directory;
    out["checkpoint"] = path.string();
    out["step"] = step;
    out["split"] = eval.split;
    io::write_file_atomically(eval.items, out.dump() + "\n");
  }
  if (baseline) {
    check_same_data(items, *baseline, "--paired-bs " + eval.baseline, "there", "here");
    print_paired(metrics::paired_bootstrap(items, *baseline, eval.bootstrap), "system", "baseline", eval.json);
  }
  return 0;
}

struct CompareArguments {
  std::string a, b;  // --items files
  metrics::PairedBootstrapOptions bootstrap;
  std::string json;
};

// compare A B: the paired bootstrap of two stored evaluations, no model needed (an experiment's
// runs can be compared after their checkpoints are gone).
int run_compare(const CompareArguments& args) {
  const nlohmann::json file_a = read_json(args.a), file_b = read_json(args.b);
  const auto a = metrics::item_statistics_from_json(file_a, args.a);
  const auto b = metrics::item_statistics_from_json(file_b, args.b);
  if (file_a.contains("split") && file_b.contains("split") && file_a["split"] != file_b["split"])
    throw Error(fmt::format("compare: {} holds items of the {} split, {} of the {} split", args.a,
                            file_a["split"].dump(), args.b, file_b["split"].dump()));
  check_same_data(a, b, "compare " + args.a + " " + args.b, "in B", "in A");
  print_paired(metrics::paired_bootstrap(a, b, args.bootstrap), "A", "B", args.json);
  return 0;
}

}  // namespace

void register_train_commands(CLI::App& app, GlobalOptions& global) {
  auto args = std::make_shared<TrainArguments>();
  auto* train_cmd = app.add_subcommand("train", "train a model on a task (" + train::task_names() + ")");
  train_cmd->footer(task_help());
  train_cmd->add_option("--config", args->config_file, "run configuration (TOML; see docs/training.md)");
  train_cmd->add_option("--resume", args->resume,
                        "continue the run in this directory from its newest checkpoint");
  train_cmd->add_option("--nproc", args->nproc,
                        "data-parallel worker processes on this machine (c10d/Gloo); for several "
                        "machines set MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE instead")
      ->check(at_least(1));
  add_setting_flags(train_cmd, args);
  train_cmd->add_option_function<std::string>(
      "--init", [args](const std::string& v) { args->overrides["model.init"] = v; },
      "start from a model directory (attnkit or Hugging Face layout): its weights are loaded, the "
      "task's new heads initialised (same as --model.init)");
  train_cmd->callback([args, &global] {
    global.action = [args, &global] { return run_train(*args, global); };
  });

  auto eval_args = std::make_shared<EvalArguments>();
  auto* eval_cmd = app.add_subcommand(
      "eval", "evaluate a run's checkpoint (newest, best, ...) on its validation (or test) data");
  eval_cmd->add_option("--run", eval_args->run, "run directory")->required();
  eval_cmd->add_option("--split", eval_args->split,
                       "val, or test: the test file (listops basic_test.tsv; the other file tasks: "
                       "the training file's name with 'train' -> 'test')")
      ->check(CLI::IsMember({"val", "test"}))
      ->capture_default_str();
  eval_cmd->add_option("--checkpoint", eval_args->checkpoint,
                       "newest, best (the best evaluation of the run), step-N, a checkpoint "
                       "directory, or init (the run's model.init untrained: a fine-tuning run's "
                       "starting point on the same data)")
      ->capture_default_str();
  eval_cmd->add_option("--compute-type", eval_args->compute_type,
                       "float32, or int8: the checkpoint quantized as generate --compute-type int8 "
                       "quantizes it (per-row int8 weights, per-row activations at run time), then "
                       "evaluated; with --paired-bs against a float32 --items file, what int8 costs")
      ->check(CLI::IsMember({"float32", "int8"}))
      ->capture_default_str();
  eval_cmd->add_option("--examples", eval_args->examples,
                       "examples to evaluate (0 = all; default: the run's task.eval_examples)")
      ->check(at_least(0));
  eval_cmd->add_option("--items", eval_args->items,
                       "write the evaluation's per-item statistics here (JSON; the lm task: each row's "
                       "negative log-likelihood and tokens) for --paired-bs of another model");
  auto* paired = eval_cmd->add_option(
      "--paired-bs", eval_args->baseline,
      "a baseline's --items file from the same data: the paired bootstrap of this checkpoint against it "
      "(sacreBLEU's resampling, metrics/stats.h); 'level' unless the difference's interval excludes 0");
  eval_cmd->add_option("--bs-samples", eval_args->bootstrap.samples, "bootstrap resamples")
      ->capture_default_str()
      ->check(at_least(1))
      ->needs(paired);
  eval_cmd->add_option("--bs-seed", eval_args->bootstrap.seed, "bootstrap seed (sacreBLEU's default)")
      ->capture_default_str()
      ->needs(paired);
  eval_cmd->add_option("--json", eval_args->json, "write the paired bootstrap's result here (metrics/stats.h)")
      ->needs(paired);
  eval_cmd->callback([eval_args, &global] {
    global.action = [eval_args, &global] { return run_eval(*eval_args, global); };
  });

  auto compare_args = std::make_shared<CompareArguments>();
  auto* compare_cmd = app.add_subcommand(
      "compare", "the paired bootstrap of two evaluations' --items files of the same data (A - B), no model needed");
  compare_cmd->add_option("A", compare_args->a, "a system's --items file (eval --items)")->required();
  compare_cmd->add_option("B", compare_args->b, "the baseline's --items file of the same data")->required();
  compare_cmd->add_option("--bs-samples", compare_args->bootstrap.samples, "bootstrap resamples")
      ->capture_default_str()
      ->check(at_least(1));
  compare_cmd->add_option("--bs-seed", compare_args->bootstrap.seed, "bootstrap seed (sacreBLEU's default)")
      ->capture_default_str();
  compare_cmd->add_option("--json", compare_args->json, "write the result here (metrics/stats.h)");
  compare_cmd->callback([compare_args, &global] {
    global.action = [compare_args] { return run_compare(*compare_args); };
  });

  auto* data_cmd = app.add_subcommand("data", "write data sets");
  data_cmd->require_subcommand(1);
  auto listops = std::make_shared<data::ListOpsSplitOptions>();
  auto listops_out = std::make_shared<std::string>();
  auto* listops_cmd = data_cmd->add_subcommand(
      "listops", "LRA ListOps splits: basic_train.tsv, basic_val.tsv, basic_test.tsv");
  listops_cmd->add_option("--out", *listops_out, "output directory")->required();
  listops_cmd->add_option("--train", listops->train_count, "training examples")->capture_default_str();
  listops_cmd->add_option("--val", listops->validation_count, "validation examples")->capture_default_str();
  listops_cmd->add_option("--test", listops->test_count, "test examples")->capture_default_str();
  listops_cmd->add_option("--min-length", listops->generator.min_length, "shortest expression (tokens)")
      ->capture_default_str();
  listops_cmd->add_option("--max-length", listops->generator.max_length, "longest expression (tokens)")
      ->capture_default_str();
  listops_cmd->add_option("--max-depth", listops->generator.max_depth, "deepest nesting")->capture_default_str();
  listops_cmd->callback([listops, listops_out, &global] {
    global.action = [listops, listops_out, &global] {
      auto files = data::write_listops_splits(*listops, *listops_out);
      if (!global.quiet) fmt::print("wrote {}, {}, {}\n", files.train, files.validation, files.test);
      return 0;
    };
  });
  add_data_corpus_command(data_cmd, global);
  add_data_parallel_command(data_cmd, global);
  add_data_lra_command(data_cmd, global);
  add_data_lra_text_command(data_cmd, global);
}

}  // namespace attnkit::cli
