#pragma once
// `attnkit demo`: the tour of what attnkit does, as stages that each write one section of the
// report (report/html.h) into RUN_DIR/<stage id>/, then RUN_DIR/facts.json and RUN_DIR/report.html.
// A stage reads what earlier stages wrote (the collapse stage analyses the models the training
// stage saved) and says so in its section when they are missing. No LibTorch in this header.
#include "attnkit/report/html.h"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace attnkit::demo {

struct DemoOptions {
  std::filesystem::path out;        // RUN_DIR
  bool quick = false;               // the 2-minute version (smaller sizes, fewer steps)
  std::vector<std::string> only;    // stage ids to run; empty = all
  uint64_t seed = 0;
  bool quiet = false;
  std::string command;              // the command line, recorded in the facts
  // Where the stages find what is not compiled in: the attnkit executable's folder (benchmark
  // executables next to it) and the source tree (Python peers under bench/peers/).
  std::filesystem::path executable_dir;
  std::filesystem::path source_dir;
};

struct StageContext {
  const DemoOptions& options;
  std::filesystem::path dir;  // RUN_DIR/<stage id>, created
};

struct Stage {
  std::string id;
  std::string title;  // also the section's title
  int order = 0;
  std::string help;   // one line for --help
  std::function<report::Section(const StageContext&)> run;
};

// Every stage, in order.
const std::vector<Stage>& stages();
// "oracles, speed, ..." for help texts and errors.
std::string stage_ids();

// What a demo run came to, stage by stage. A missed target (a headline with met = false) is a
// result, shown in the report and in the summary line; only a stage that failed (it threw: an
// error of its own, or a command it ran failed) makes the run fail.
struct DemoOutcome {
  std::vector<std::string> ran;     // ids of the stages that ran, in order
  std::vector<std::string> missed;  // ran to the end, with at least one target missed
  std::vector<std::string> failed;  // threw

  // Files one stage: `threw` when its run threw (its section is then the failure's section).
  void add(const std::string& id, const report::Section& section, bool threw);
  // 0 when no stage failed (missed targets included), else 1.
  int exit_status() const;
  // One line for the end of `attnkit demo`, e.g. "demo: 6 stages ran; 1 missed a target (heads);
  // none failed".
  std::string summary() const;
};

// Runs the chosen stages (throws attnkit::Error naming an unknown stage id before running any),
// writes each section as it completes, the facts and report.html. A stage that throws becomes a
// section saying what failed; the others still run.
DemoOutcome run_demo(const DemoOptions& options);

// The stages' own parts, exposed for their tests.
report::Section oracles_stage(const StageContext& context);
report::Section speed_stage(const StageContext& context);
report::Section training_stage(const StageContext& context);
report::Section lra_stage(const StageContext& context);
report::Section collapse_stage(const StageContext& context);
report::Section heads_stage(const StageContext& context);
report::Section translation_stage(const StageContext& context);
report::Section pretrained_stage(const StageContext& context);
report::Section decoding_stage(const StageContext& context);

}  // namespace attnkit::demo
