// attnkit data lra-pathfinder: the Long-Range Arena's Pathfinder splits (include/attnkit/train/
// pathfinder.h) and a sheet of sample images.
#include "command.h"

#include "attnkit/error.h"
#include "attnkit/data/pathfinder.h"

#include <fmt/format.h>

#include <memory>

namespace attnkit::cli {

namespace {

struct PathfinderArguments {
  std::string out;
  int size = 32;
  size_t train = 20000;
  size_t val = 2000;
  size_t test = 2000;
  uint64_t seed = 0;
  std::string samples;
  int sample_count = 16;
  // Overrides of the size's hard settings (-1: keep).
  int paddles = -1;
  int distractors = -1;
  int distractor_paddles = -1;
  double max_turn = -1;
};

int run_pathfinder(const PathfinderArguments& a, bool seed_given, const GlobalOptions& global) {
  if (a.out.empty() && a.samples.empty()) throw Error("data lra-pathfinder: give --out DIR, --samples FILE or both");
  data::PathfinderSplitOptions options;
  options.generator = data::pathfinder_options(a.size);
  if (a.paddles >= 0) options.generator.paddles = a.paddles;
  if (a.distractors >= 0) options.generator.distractors = a.distractors;
  if (a.distractor_paddles >= 0) options.generator.distractor_paddles = a.distractor_paddles;
  if (a.max_turn >= 0) options.generator.max_turn_degrees = a.max_turn;
  data::check_pathfinder_options(options.generator);
  options.train_count = a.train;
  options.validation_count = a.val;
  options.test_count = a.test;
  options.seed = seed_given ? a.seed : global.seed;
  if (!a.samples.empty()) {
    // The first images of the training split's stream (the same seed).
    auto images = data::generate_pathfinder(options.generator, options.seed * 4 + 1,
                                             static_cast<size_t>(a.sample_count));
    data::write_pathfinder_sheet(images, a.samples);
    if (!global.quiet) fmt::print("wrote {}\n", a.samples);
  }
  if (!a.out.empty()) {
    auto files = data::write_pathfinder_splits(options, a.out);
    if (!global.quiet) fmt::print("wrote {}, {}, {}\n", files.train, files.validation, files.test);
  }
  return 0;
}

}  // namespace

void add_data_lra_command(CLI::App* data_cmd, GlobalOptions& global) {
  auto args = std::make_shared<PathfinderArguments>();
  auto* cmd = data_cmd->add_subcommand(
      "lra-pathfinder",
      "LRA Pathfinder images (two markers on one contour or not): pathfinder{size}_{train,val,test}.bin");
  cmd->add_option("--out", args->out, "output directory");
  cmd->add_option("--size", args->size, "image size: 32 (LRA's hard Pathfinder) or 128 (Pathfinder-X)")
      ->check(CLI::IsMember({32, 128}))
      ->capture_default_str();
  cmd->add_option("--train", args->train, "training images")->capture_default_str();
  cmd->add_option("--val", args->val, "validation images")->capture_default_str();
  cmd->add_option("--test", args->test, "test images")->capture_default_str();
  auto* seed = cmd->add_option("--seed", args->seed, "random seed (default: the global --seed)");
  cmd->add_option("--samples", args->samples, "also write a sheet of sample images (.svg or .pgm)");
  cmd->add_option("--sample-count", args->sample_count, "images on the sample sheet")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_option("--paddles", args->paddles, "paddles per target contour (default: 14)")->check(at_least(1));
  cmd->add_option("--distractors", args->distractors, "distractor contours (default: 5)")->check(at_least(0));
  cmd->add_option("--distractor-paddles", args->distractor_paddles, "paddles per distractor (default: 4)")
      ->check(at_least(1));
  cmd->add_option("--max-turn", args->max_turn, "largest turn between paddles, degrees (default: 30)")
      ->check(CLI::Range(0.0, 90.0));
  cmd->callback([args, seed, &global] {
    const bool seed_given = seed->count() > 0;
    global.action = [args, seed_given, &global] { return run_pathfinder(*args, seed_given, global); };
  });
}

}  // namespace attnkit::cli
