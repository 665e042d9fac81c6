#pragma once
// Concrete training tasks for the Trainer (trainer.h), built from a RunConfig:
//   listops          LRA ListOps, 10-way classification of the whole sequence (data from
//                    `attnkit data listops` files, or generated with the task's lengths)
//   classification   text classification TSV/JSONL (text_datasets.h) with a tokenizer
//   copy | reverse | sort | recall
//                    synthetic sequence tasks as a causal LM that predicts the target part
//   lm               causal LM over text files (tokenised, packed into blocks)
//   tagging | span   token tagging (entity F1), SQuAD-style span extraction (EM / F1)
//   seq2seq          UniLM on source<TAB>target pairs, scored by corpus BLEU of greedy decodes
// Data order is a pure function of the micro-batch index: example positions g·B .. g·B+B-1 of the
// concatenation of per-epoch permutations (seeded by run seed and epoch), with g = index·world +
// rank, so ranks read disjoint batches and a resumed run reads what the uninterrupted one did.
#include "attnkit/train/run_config.h"
#include "attnkit/train/trainer.h"

#include <memory>

namespace attnkit::train {

// The TransformerConfig + heads the run's model gets (family presets, sizes, attention kind).
models::TransformerConfig model_config(const RunConfig& config, int64_t vocab_size,
                                       int64_t longest_input, bool causal);

// Builds the task (reads or generates its data, builds the model). Throws attnkit::Error for
// an unknown task, missing data or a tokenizer the task needs.
std::unique_ptr<TrainingTask> make_task(const RunConfig& config);

// The model of a task made by make_task (for eval and export).
models::TaskModel task_model(TrainingTask& task);

}  // namespace attnkit::train
