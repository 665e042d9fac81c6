#pragma once
// The run settings the training tests start from: a quiet run of one task on a tiny model without
// dropout; each test then sets its data, sizes and schedule.
#include "attnkit/train/run_config.h"

#include <cstdint>
#include <string>

namespace attnkit::testing {

inline train::RunConfig quiet_tiny_run(const std::string& task, int64_t batch_size, int64_t hidden,
                                       int64_t layers, int64_t heads) {
  train::RunConfig c;
  c.task.name = task;
  c.task.batch_size = batch_size;
  c.model.hidden = hidden;
  c.model.layers = layers;
  c.model.heads = heads;
  c.model.dropout = 0.0;
  c.trainer.quiet = true;
  c.trainer.log_every = 1000;
  return c;
}

}  // namespace attnkit::testing
