// `attnkit linearize`: a trained softmax model's attention layers (all, some sites or layers, or
// all but the K most important by `analyze heads`) swapped for a linear-family kind (cosFormer,
// linear attention with a fixed or trained feature map), with stage 1 of the conversion (Zhang
// et al. 2024, LoLCATs; Kasai et al. 2021, T2R; issue 45): attention transfer, the feature maps
// alone trained so each converted layer's per-head contexts match the softmax layer's on the
// model's own data (MultiHeadAttentionImpl::set_transfer_teacher). Writes the student in attnkit
// format with its tokenizer, and transfer.json (the loss curves and the held-out values per
// layer). Stage 2 is `attnkit train --init OUT`. See docs/training.md.
#include "attnkit/analysis/linearize.h"
#include "attnkit/error.h"
#include "attnkit/io/atomic_file.h"
#include "attnkit/io/model_directory.h"
#include "attnkit/parse.h"
#include "command.h"
#include "heads_data.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace attnkit::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct LinearizeOptions {
  std::string model, kind, out, sites, layers, importance, data, eval_data, tokenizer;
  int64_t keep_softmax = -1;
  int64_t steps = 200;
  int64_t batch_size = 8;
  int64_t max_length = 128;
  int64_t log_every = 10;
  double lr = 1e-2;
};

// A comma-separated list ("a,b , c"), empty items dropped.
std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const auto begin = item.find_first_not_of(' '), end = item.find_last_not_of(' ');
    if (begin != std::string::npos) out.push_back(item.substr(begin, end - begin + 1));
  }
  return out;
}

std::vector<int64_t> parse_layers(const std::string& text) {
  std::vector<int64_t> out;
  for (const auto& item : split_list(text)) {
    const auto v = try_parse_unsigned(item);
    if (!v || *v > 1000000)
      throw Error(fmt::format("--layers: '{}' is not a layer index (give e.g. 0,2,5)", one_line(item)));
    out.push_back(static_cast<int64_t>(*v));
  }
  if (out.empty()) throw Error("--layers: no layer given");
  return out;
}

int run_linearize(const LinearizeOptions& o, const GlobalOptions& global) {
  // What the flags decide, checked before the model is read.
  const layers::AttentionSpec kind = analysis::linear_family_kind(o.kind);
  if (o.keep_softmax >= 0 && o.importance.empty())
    throw Error("--keep-softmax K needs --importance heads.json (attnkit analyze heads --out)");
  if (o.keep_softmax < 0 && !o.importance.empty()) throw Error("--importance is read with --keep-softmax K");
  if (o.keep_softmax >= 0 && !o.layers.empty()) throw Error("give --layers or --keep-softmax, not both");
  const std::vector<int64_t> layers = o.layers.empty() ? std::vector<int64_t>{} : parse_layers(o.layers);
  for (const auto* path : {&o.data, &o.eval_data, &o.importance})
    if (!path->empty() && !fs::is_regular_file(*path)) throw Error(fmt::format("linearize: no file {}", *path));
  std::error_code ec;
  if (fs::exists(o.out) && fs::equivalent(o.model, o.out, ec))
    throw Error("linearize: --out must differ from --model");

  io::LoadedModel teacher = io::load_model(o.model);
  const auto convert = analysis::layers_to_convert(*teacher.model, split_list(o.sites), layers, o.keep_softmax,
                                                   o.importance);
  analysis::Student student = analysis::make_student(*teacher.model, convert, kind);

  // The model's own task's examples; held out: --eval-data, else the last 10% of them.
  HeadsDataOptions d;
  d.tokenizer = o.tokenizer;
  d.max_length = o.max_length;
  d.batch_size = o.batch_size;
  const auto read = heads_data_reader(d);
  analysis::HeadsInputs train = read(o.data, o.model, teacher), held_out;
  if (!o.eval_data.empty()) {
    held_out = read(o.eval_data, o.model, teacher);
  } else {
    const int64_t n = analysis::input_row_count(train);
    if (n < 2)
      throw Error(fmt::format("--data {}: {} example(s); the last 10% are held out: give more, or --eval-data",
                              o.data, n));
    const int64_t held = std::max<int64_t>(1, n / 10);
    held_out = analysis::input_rows(train, n - held, n);
    train = analysis::input_rows(train, 0, n - held);
  }
  analysis::TransferOptions t;
  t.steps = o.steps;
  t.batch_size = o.batch_size;
  t.log_every = o.log_every;
  t.lr = o.lr;
  t.seed = global.seed;
  if (!global.quiet) {
    fmt::print("{} of {} attention layers to {}; {} training, {} held-out examples\n", convert.size(),
               [&] {
                 int64_t all = 0;
                 for (const auto& s : teacher.model->attention_sites()) all += s.layers();
                 return all;
               }(),
               kind.to_string(), analysis::input_row_count(train), analysis::input_row_count(held_out));
    t.on_log = [&](int64_t step, const std::vector<double>& losses) {
      double sum = 0;
      for (double v : losses) sum += v;
      const size_t worst = size_t(std::max_element(losses.begin(), losses.end()) - losses.begin());
      fmt::print("step {}/{} transfer loss {:.6g} (largest: {} layer {} {:.6g})\n", step, o.steps, sum,
                 convert[worst].site, convert[worst].layer, losses[worst]);
    };
  }
  const auto result = analysis::attention_transfer(student, train, held_out, t);
  nlohmann::json report = analysis::to_json(student, result);
  if (!global.quiet && !result.trained)
    fmt::print("{}: {}; the transfer loss is measured on the held-out examples only\n", kind.to_string(),
               student.feature_maps.empty() ? "no trained feature map, stage 1 skipped" : "--steps 0");

  io::LoadedModel out;
  out.model = student.model;
  out.path = teacher.path;
  out.format = "attnkit";
  io::save_model(out, o.out, "attnkit");
  report["model"] = teacher.path;
  report["kind"] = kind.to_string();
  report["lr"] = o.lr;
  report["batch_size"] = o.batch_size;
  report["seed"] = global.seed;
  report["data"] = o.data;
  report["eval_data"] = o.eval_data.empty() ? nlohmann::json("last 10% of --data") : nlohmann::json(o.eval_data);
  io::write_file_atomically((fs::path(o.out) / "transfer.json").string(), report.dump(2) + "\n");
  if (!global.quiet)
    fmt::print("held-out transfer loss {:.6g} -> {:.6g}; wrote {} (attnkit format) with transfer.json\n",
               report["total"]["initial"].get<double>(), report["total"]["final"].get<double>(), o.out);
  return 0;
}

}  // namespace

void register_linearize_command(CLI::App& app, GlobalOptions& global) {
  auto o = std::make_shared<LinearizeOptions>();
  auto* cmd = app.add_subcommand(
      "linearize",
      "swap a trained softmax model's attention for a linear-family kind (cosformer, linear:elu, "
      "linear:relu, linear:t2r[:M], linear:hedgehog[:M]) and train the new feature maps alone to "
      "match each softmax layer's outputs on the model's data (attention transfer, stage 1); writes "
      "the model in attnkit format and transfer.json; fine-tune it with train --init OUT (stage 2)");
  cmd->add_option("--model", o->model,
                  "model directory (attnkit or Hugging Face layout), .gguf file, checkpoint or run directory")
      ->required();
  cmd->add_option("--kind", o->kind, "the converted layers' kind: cosformer, linear:elu, linear:relu, "
                                     "linear:favor[:M[:SEED]], linear:t2r[:M], linear:hedgehog[:M]")
      ->required();
  cmd->add_option("--out", o->out, "output model directory")->required();
  cmd->add_option("--sites", o->sites,
                  "attention sites to convert, e.g. decoder.self,decoder.cross (encoder.self, "
                  "decoder.self, decoder.cross; default: every site of the model)");
  cmd->add_option("--layers", o->layers, "layers to convert at each chosen site, e.g. 0,2,5 (default: all)");
  cmd->add_option("--keep-softmax", o->keep_softmax,
                  "keep the K layers of highest summed head importance (--importance) as softmax and "
                  "convert the others of the chosen sites")
      ->check(at_least(0));
  cmd->add_option("--importance", o->importance, "heads.json of attnkit analyze heads --out (with --keep-softmax)");
  cmd->add_option("--data", o->data,
                  "the model's kind of data, as analyze heads --data reads it: plain text for a causal "
                  "LM (windows of --max-length tokens), labelled TSV for a classifier, source<TAB>target "
                  "pairs for an encoder-decoder")
      ->required();
  cmd->add_option("--eval-data", o->eval_data,
                  "held-out data for the final transfer losses (default: the last 10% of the examples of --data)");
  cmd->add_option("--tokenizer", o->tokenizer, "tokenizer file or directory (default: the model's)");
  cmd->add_option("--steps", o->steps, "stage 1 optimizer steps (trained feature maps only)")
      ->check(at_least(0))
      ->capture_default_str();
  cmd->add_option("--lr", o->lr, "Adam's learning rate for the feature maps")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--batch-size", o->batch_size, "examples per step")->check(at_least(1))->capture_default_str();
  cmd->add_option("--max-length", o->max_length, "tokens per example or LM window")
      ->check(at_least(2))
      ->capture_default_str();
  cmd->add_option("--log-every", o->log_every, "log the transfer losses every N steps (and the first and last)")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->callback([o, &global] { global.action = [o, &global] { return run_linearize(*o, global); }; });
}

}  // namespace attnkit::cli
