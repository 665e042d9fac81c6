// The task registry: one row per task name (what it reads, whether it has a test split and needs a
// tokenizer, a line of help, its factory). make_task dispatches on it; its errors, the help of
// task.name / task.tokenizer / task.eval_split (run_config.cpp) and `attnkit train --help` list
// from it, so a task is added by a file in this folder and one row here.
#include "task_common.h"

#include "attnkit/error.h"
#include "attnkit/layers/lora.h"
#include "attnkit/text/tokenizer_json.h"
#include "attnkit/train/tasks.h"

#include <fmt/format.h>

#include <algorithm>

namespace attnkit::train {

const std::vector<TaskInfo>& task_registry() {
  using detail::make_listops, detail::make_seq2seq, detail::make_span, detail::make_synthetic,
      detail::make_tagging, detail::make_text_classification, detail::make_text_lm,
      detail::make_translation;
  using detail::make_mlm, detail::make_plm;
  using detail::make_conditional_lm;
  constexpr auto kNone = TaskData::kNone, kOptional = TaskData::kOptional, kRequired = TaskData::kRequired;
  // name, task.data, files (what task.data names), test split, tokenizer, help, factory
  static const std::vector<TaskInfo> table{
      {"listops", kOptional, "a directory with basic_{train,val,test}.tsv from `attnkit data listops`", true,
       false, "LRA ListOps: 10-way classification of the whole sequence", make_listops},
      {"classification", kRequired, "the training file", true, true,
       "text classification of TSV/JSONL examples (accuracy)", make_text_classification},
      {"tagging", kRequired, "the training file", true, true,
       "token tagging, BIO tags per word (entity F1)", make_tagging},
      {"span", kRequired, "the SQuAD-style training JSON", true, true,
       "SQuAD-style span extraction (exact match, F1)", make_span},
      {"seq2seq", kRequired, "the training TSV: source<TAB>target", true, true,
       "UniLM source -> target (corpus BLEU of greedy decodes)", make_seq2seq},
      {"translation", kRequired, "the training TSV: source<TAB>target", true, true,
       "encoder-decoder source -> target (sacreBLEU of greedy or beam decodes)", make_translation},
      {"lm", kRequired, "text files separated by commas", true, true,
       "causal LM over text files in blocks of task.truncate tokens (perplexity)", make_text_lm},
      {"mlm", kRequired, "text files separated by commas", false, true,
       "masked-LM pretraining (RoBERTa: dynamic 80/10/10 masking, packed blocks; perplexity)", make_mlm},
      {"plm", kRequired, "text files separated by commas", false, true,
       "permutation LM through the attention mask (XLNet; two-stream attention with task.two_stream; perplexity)", make_plm},
      {"conditional-lm", kRequired, "the labelled training file: TSV text<TAB>label or JSONL", true, true,
       "causal LM conditioned on each text's label through Conditional LayerNorm (perplexity)", make_conditional_lm},
      {"copy", kNone, "", false, false, "synthetic: repeat the symbols (causal LM, sequence accuracy)",
       make_synthetic},
      {"reverse", kNone, "", false, false, "synthetic: the symbols reversed", make_synthetic},
      {"sort", kNone, "", false, false, "synthetic: the symbols sorted", make_synthetic},
      {"recall", kNone, "", false, false, "synthetic associative recall: the value of the queried key",
       make_synthetic},
      {"associative-recall", kNone, "", false, false, "the same as recall", make_synthetic},
      {"lra-pathfinder", kOptional,
       "a directory with pathfinder{32,128}_{train,val,test}.bin from `attnkit data lra-pathfinder`, or the training "
       "file",
       true, false, "LRA Pathfinder: are the two markers on one contour (pixel tokens, 2 classes)",
       detail::make_lra_pathfinder},
      {"lra-image", kRequired, "the Fashion-MNIST directory, e.g. /usr/share/datasets/fashion-mnist", true, false,
       "LRA Image with Fashion-MNIST for CIFAR-10: 10-way classification of pixel tokens", detail::make_lra_image},
      {"lra-text", kRequired, "a directory with text_{train,val,test}.tsv from `attnkit data lra-text`, or the training file",
       true, false, "LRA Text on Debian fortunes: the category of a 1-4K-byte passage (byte tokens)",
       detail::make_lra_text},
      {"lra-retrieval", kRequired,
       "a directory with retrieval_{train,val,test}.tsv from `attnkit data lra-retrieval`, or the training file", true,
       false, "LRA Retrieval on Debian fortunes: two passages of one category or not (two towers, byte tokens)",
       detail::make_lra_retrieval},
  };
  return table;
}

const TaskInfo* find_task(const std::string& name) {
  const auto& table = task_registry();
  auto it = std::find_if(table.begin(), table.end(), [&](const TaskInfo& t) { return t.name == name; });
  return it == table.end() ? nullptr : &*it;
}

std::string task_names(const std::string& separator, const std::function<bool(const TaskInfo&)>& keep) {
  std::string out;
  for (const auto& t : task_registry()) {
    if (keep && !keep(t)) continue;
    if (!out.empty()) out += separator;
    out += t.name;
  }
  return out;
}

std::unique_ptr<TrainingTask> make_task(const RunConfig& config) {
  const auto& name = config.task.name;
  if (config.task.batch_size < 1) throw Error("task.batch_size must be >= 1");
  if (config.task.truncate < 1) throw Error("task.truncate must be >= 1");
  if (config.task.eval_split != "val" && config.task.eval_split != "test")
    throw Error(fmt::format("task.eval_split: '{}' is not val or test", config.task.eval_split));
  const TaskInfo* task = find_task(name);
  if (!task) throw Error(fmt::format("task.name: '{}' is not one of {}", name, task_names()));
  const bool has_files =
      task->test_split && (task->data == TaskData::kRequired || !config.task.data.empty());
  if (config.task.eval_split == "test" && !has_files) {
    std::string with_tests;
    for (const auto& t : task_registry()) {
      if (!t.test_split) continue;
      if (!with_tests.empty()) with_tests += ", ";
      with_tests += t.name + (t.data == TaskData::kOptional ? " with task.data" : "");
    }
    throw Error(fmt::format("task.eval_split = test needs test files ({}); task '{}' has none", with_tests,
                            name));
  }
  if (config.lora.rank != 0) layers::check_lora_options(config.lora);  // before the model is built
  auto made = task->make(config);
  if (config.lora.rank > 0) {
    const int64_t adapters = layers::add_lora(made->module(), config.lora);
    int64_t trained = 0, total = 0;
    for (const auto& p : made->module().parameters()) {
      total += p.numel();
      if (p.requires_grad()) trained += p.numel();
    }
    if (!config.trainer.quiet)
      fmt::print(stderr, "lora: {} adapters of rank {} (alpha {}, on {}); {} of {} parameters train\n", adapters,
                 config.lora.rank, config.lora.alpha, config.lora.targets, trained, total);
  }
  // Checkpoints carry the tokenizer of a task that reads text through one, so a run directory
  // is a model with its tokenizer.
  if (task->tokenizer)
    made->add_checkpoint_file("tokenizer.json", text::tokenizer_to_json_string(detail::task_tokenizer(config)));
  return made;
}

}  // namespace attnkit::train
