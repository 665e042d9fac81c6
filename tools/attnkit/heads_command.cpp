// `attnkit analyze heads` and `attnkit prune`: head importance, ablations and the pruning profile
// (Michel et al. 2019; analysis/heads.h) of a sequence classifier on a labelled data file, of a
// causal language model on a text file or of an encoder-decoder on translation pairs, and physical
// head pruning of a model directory (either layout). The experiments are
// analysis/heads_experiment.h's, the output folder report/head_plots.h's; this file keeps the
// flags and the printing. See docs/analysis.md.
#include "attnkit/analysis/heads_experiment.h"
#include "attnkit/data/text_datasets.h"
#include "attnkit/decode/generation_run.h"
#include "attnkit/decode/language_models.h"
#include "attnkit/models/batching.h"
#include "attnkit/models/encoder_decoder.h"
#include "attnkit/models/task_model.h"
#include "attnkit/error.h"
#include "attnkit/io/gguf_model.h"
#include "attnkit/io/model_directory.h"
#include "attnkit/progress.h"
#include "attnkit/report/head_plots.h"
#include "attnkit/text/pretrained.h"
#include "attnkit/text/text_tokenizer.h"
#include "attnkit/metrics/metrics.h"
#include "attnkit/train/data_tensors.h"
#include "attnkit/train/translation.h"
#include "command.h"
#include "heads_data.h"

#include <ATen/ATen.h>
#include <filesystem>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <sstream>
#include <vector>

namespace attnkit::cli {
namespace {

using DataOptions = HeadsDataOptions;

void add_data_options(CLI::App* cmd, DataOptions& d) {
  cmd->add_option("--data", d.data,
                  "an encoder-decoder: translation pairs (TSV source<TAB>target, as train --task.name "
                  "translation reads them); a classifier: labelled data (TSV text<TAB>label or JSONL {\"text\", \"label\"}; "
                  "labels as the model was trained: sorted distinct labels of the file); a causal "
                  "LM (no classifier): plain text, tokenised as train --task.name lm does and cut "
                  "into windows of --max-length tokens that share one token (a last partial "
                  "window is dropped)");
  cmd->add_option("--tokenizer", d.tokenizer, "tokenizer file or directory (default: the model directory)");
  cmd->add_option("--max-length", d.max_length,
                  "tokens per example (longer ones are truncated) or per LM window; at most the "
                  "model's positions")
      ->check(at_least(2))
      ->capture_default_str();
  cmd->add_option("--batch-size", d.batch_size, "examples (LM: windows) per forward pass")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_option("--score-examples", d.score_examples,
                  "examples (LM: windows) of the data the importance is computed on (0 = all)")
      ->check(at_least(0))
      ->capture_default_str();
  cmd->add_option("--beams", d.beams,
                  "an encoder-decoder's BLEU metric: beam size of its decodes (1 = greedy)")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_option("--length-penalty", d.length_penalty, "beam search's length penalty (--beams > 1)")
      ->capture_default_str();
}

std::vector<double> parse_fractions(const std::string& text) {
  std::vector<double> out;
  if (text.empty()) return out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const auto begin = item.find_first_not_of(' '), end = item.find_last_not_of(' ');
    const auto v = begin == std::string::npos ? std::nullopt : try_parse_double(item.substr(begin, end - begin + 1));
    if (!v) throw Error(fmt::format("--fractions: '{}' is not a number (give percentages, e.g. 10,20,50)", item));
    out.push_back(*v / 100.0);
  }
  return out;
}

// An encoder-decoder's pairs through the translation task's pipeline (train/translation.h): the
// source cut to --max-length and the encoder's positions, the target to one token less (and the
// decoder's positions); the decoder reads start + target and predicts target + the end token.
// The metric: sacreBLEU's corpus BLEU (a fraction) of the sources' decodes (greedy, or --beams,
// in batches of --batch-size) against the targets as the file has them.
analysis::HeadsInputs translation_inputs(const DataOptions& d, const std::string& path,
                                         const io::LoadedModel& loaded) {
  const std::shared_ptr<models::Model> held = loaded.model;  // the metric keeps it alive
  models::EncoderDecoderModelImpl* model = &held->encoder_decoder("analyze heads");
  // Any tokenizer (Marian's files: targets cut by target.spm, as MarianTokenizer's text_target).
  const std::shared_ptr<const text::TextTokenizer> tokenizer = io::tokenizer_for_model(d.tokenizer, loaded.path);
  if (!tokenizer)
    throw Error(fmt::format("analyze heads: {} has no tokenizer; give --tokenizer PATH", loaded.path));
  const auto& c = model->config();
  decode::GenerationConfig g;
  // The end token by name: the model's, then the fallbacks (not the tokenizer's own first, as
  // generate asks: text/text_tokenizer.h).
  const models::DecodingTraits traits = model->decoding_traits();
  const text::EndTokenRule end_rule{traits.end_token, /*fallbacks=*/true,
                                    /*tokenizer_end_first=*/false};
  const std::optional<int64_t> tokenizer_eos = text::end_token_id(*tokenizer, end_rule);
  decode::set_special_tokens(g, loaded.huggingface.config_json, {}, false, tokenizer_eos,
                             c.decoder.pad_token_id);
  // A Hugging Face directory's bad_words_ids / forced EOS, as generate applies them.
  decode::set_generation_rules(g, loaded.huggingface.config_json, loaded.path + "/config.json");
  if (g.eos_token_ids.empty())
    throw Error(fmt::format("analyze heads: the tokenizer of {} has no end token ({})", loaded.path,
                            text::end_token_names(end_rule)));
  // The translation task's pipeline (train/translation.h): the decoder starts from the model's
  // start token (its pad id unless the config names one) and pads with its pad id.
  const train::TranslationTokens tokens{model->decoder_start_token(), c.decoder.pad_token_id,
                                        g.eos_token_ids.front()};
  auto pairs = train::encode_translation_pairs(data::read_seq2seq_tsv(path), *tokenizer,
                                               traits.prompts_take_special_tokens);
  train::cut_translation_pairs(pairs, std::min(d.max_length, c.encoder.max_positions),
                               std::min(d.max_length, c.decoder.max_positions) - 1);
  if (pairs.empty())
    throw Error(fmt::format("--data {}: no pair has tokens on both sides", path));
  std::vector<const train::TranslationPair*> rows;
  auto sources = std::make_shared<std::vector<std::vector<int64_t>>>();
  auto references = std::make_shared<std::vector<std::vector<std::string>>>();
  int64_t longest = 1;
  for (const auto& p : pairs) {
    rows.push_back(&p);
    sources->push_back(p.source);
    references->push_back({p.reference});
    longest = std::max<int64_t>(longest, int64_t(p.target.size()));
  }
  const train::TranslationBatch b = train::translation_batch(rows, tokens);
  analysis::HeadsInputs out;
  out.translation = {b.source, b.source_mask, b.decoder_input, b.target_mask, b.labels};
  g.strategy = d.beams > 1 ? decode::Strategy::Beam : decode::Strategy::Greedy;
  g.num_beams = d.beams;
  g.length_penalty = d.length_penalty;
  g.max_new_tokens = std::min<int64_t>(longest + 1, c.decoder.max_positions - 1);
  g.eos_token_ids = {tokens.eos};
  g.pad_token_id = tokens.pad;
  const int64_t batch = d.batch_size;
  out.metric_name = "bleu";
  // The latest decodes' per-sentence statistics (the profiles' paired bootstrap items).
  auto items = std::make_shared<metrics::ItemStatistics>();
  out.metric = [held, model, sources, references, tokenizer, g, tokens, batch, items]() {
    std::vector<std::string> hypotheses;
    for (const auto& ids : train::translate(*model, *sources, g, tokens, batch))
      hypotheses.push_back(tokenizer->decode_ids(ids));
    *items = metrics::sacrebleu_item_statistics(hypotheses, *references);
    return metrics::sacrebleu_corpus_bleu(hypotheses, *references).score;
  };
  out.metric_items = [items] { return *items; };
  return out;
}

}  // namespace

// Data files tokenised with --tokenizer (default: the model directory's) for the model's task:
// a classifier's labelled examples, or a language model's text cut into windows of --max-length.
analysis::HeadsDataReader heads_data_reader(const HeadsDataOptions& d) {
  return [d](const std::string& path, const std::string& model_dir, const io::LoadedModel& loaded) {
    // The model's own tokenizer: where it was read from (a run directory's checkpoint).
    if (analysis::heads_task_kind(model_dir, loaded) == analysis::HeadsTaskKind::Translation)
      return translation_inputs(d, path, loaded);
    const auto tokenizer = io::load_tokenizer(d.tokenizer.empty() ? loaded.path : d.tokenizer);
    const int64_t length = std::min(d.max_length, loaded.config.max_positions);
    if (analysis::heads_task_kind(model_dir, loaded) == analysis::HeadsTaskKind::LanguageModel) {
      // The token stream `attnkit train --task.name lm` trains on, in windows of `length` tokens
      // that share one token: every token after the first is predicted once, and a window's
      // predictions are the trainer's for a block of length - 1 inputs.
      data::LanguageModelDataOptions options;
      options.block_size = size_t(length - 1);
      // A pretrained model read from Hugging Face or GGUF files saw every text after the begin
      // token its tokenizer puts first (Gemma's <bos>; SmolLM2 and GPT-2 put none): each window
      // starts with it, and the window's other length - 1 tokens are the stream's next ones. Only
      // a lone begin token counts: an encoder's template ([CLS] text [SEP]) is not one.
      if (loaded.format == "huggingface")
        if (const auto begin = text::leading_special_token(tokenizer))
          options.begin_of_window_id = static_cast<uint32_t>(*begin);
      const auto windows = data::read_language_model_data({path}, tokenizer, options);
      if (windows.blocks.empty())
        throw Error(fmt::format("--data {}: {} tokens, fewer than one window of {} tokens", path,
                                windows.tokens, length));
      std::vector<int64_t> ids;
      for (const auto& block : windows.blocks) ids.insert(ids.end(), block.begin(), block.end());
      analysis::HeadsInputs out;
      out.input_ids = at::tensor(ids, at::kLong).view({int64_t(windows.blocks.size()), length});
      return out;
    }
    const auto data = data::read_classification(path);
    auto t = train::classification_tensors(data, tokenizer, length, loaded.config.pad_token_id);
    analysis::HeadsInputs out;
    out.input_ids = t.input_ids;
    out.attention_mask = t.attention_mask;
    out.labels = t.labels;
    out.label_count = int64_t(data.labels.size());
    return out;
  };
}

namespace {

// A progress bar per phase on a terminal; in a log a line every 10 units and at a phase's end
// (an analysis can take hours: its log shows where it is); nothing with --quiet.
analysis::HeadsProgress bars(bool quiet) {
  return [quiet](const std::string& unit) {
    ProgressOptions p;
    p.unit = unit;
    p.log_every = 10;
    p.plain_lines = true;
    p.quiet = quiet;
    return std::make_unique<ProgressReporter>(p);
  };
}

struct AnalyzeHeads {
  std::string model, run, out, score_data;
  DataOptions data;
  std::string fractions;
  bool exact = false;
  bool no_ablation = false;
  int64_t min_heads = 1;
  int64_t random_orders = 5;
};

// One line per profile step after the first: the metric, and the paired bootstrap interval of the
// change from the unpruned model on the items; the random orders' mean ± sd; importance
// against random; and a language model's perplexity budget.
void print_statistics(const analysis::HeadsAnalysis& r) {
  for (size_t i = 0; i < r.profiles.size(); ++i) {
    const auto& p = r.profiles[i];
    fmt::print("  {:<10}", fmt::format("{}{}", analysis::to_string(p.order), p.groups ? " (g)" : ""));
    if (p.order == analysis::PruningOrder::Random) fmt::print(" seed {}", p.seed);
    for (const auto& s : p.steps) fmt::print(" {:.0f}%:{:.3f}", 100 * s.fraction, s.metric);
    fmt::print("\n");
  }
  for (size_t i = 0; i < r.profiles.size() && i < r.statistics.size(); ++i) {
    const auto& p = r.profiles[i];
    const auto& st = r.statistics[i];
    if (p.order != analysis::PruningOrder::Importance || st.vs_baseline.empty()) continue;
    const char* unit = p.groups ? "key/value groups" : "heads";
    const auto metric = metrics::metric_name(st.vs_baseline.front().bootstrap.metric);
    fmt::print("importance order ({}), {} change from unpruned (95% paired bootstrap, {} items):\n",
               unit, metric, st.vs_baseline.front().bootstrap.items);
    for (const auto& v : st.vs_baseline) {
      const auto& d = v.bootstrap.difference;
      fmt::print("  {:>4} pruned: {:+.4f} [{:+.4f}, {:+.4f}] ({:+.1f}% [{:+.1f}%, {:+.1f}%])\n",
                 p.steps[v.step].pruned, d.score, d.interval.low, d.interval.high, 100 * v.relative.score,
                 100 * v.relative.interval.low, 100 * v.relative.interval.high);
    }
    if (st.budget && st.budget->step == 0) {
      const auto& first = st.vs_baseline.front();
      fmt::print("  at <= {:.0f}% perplexity increase: no step (the first, {} {} pruned, is {:+.1f}% "
                 "[{:+.1f}%, {:+.1f}%])\n",
                 100 * st.budget->budget, p.steps[first.step].pruned, unit, 100 * first.relative.score,
                 100 * first.relative.interval.low, 100 * first.relative.interval.high);
    } else if (st.budget) {
      const auto& b = *st.budget;
      fmt::print("  at <= {:.0f}% perplexity increase: {} {} pruned ({:+.1f}% [{:+.1f}%, {:+.1f}%]; "
                 "upper end {}); {} with the upper end within; heads kept per layer: {}\n",
                 100 * b.budget, b.pruned, unit, 100 * b.increase, 100 * b.interval.low,
                 100 * b.interval.high, b.upper_within ? "within" : "beyond", b.pruned_upper,
                 fmt::join(b.kept_per_layer, " "));
    }
  }
  for (const auto& band : r.random_bands) {
    const char* unit = band.groups ? "key/value groups" : "heads";
    if (!band.steps.empty()) {
      fmt::print("random orders ({}, {} seeds), {} mean ± sd:", unit, band.seeds.size(),
                 r.metric_name);
      for (const auto& s : band.steps)
        fmt::print(" {:.0f}%:{:.3f} ± {:.3f}", 100 * s.fraction, s.metric.mean, s.metric.sd);
      fmt::print("\n");
    }
    // The items' metric (a language model's perplexity), importance - the random orders' mean.
    std::string item_metric;
    for (const auto& p : r.profiles)
      if (p.groups == band.groups && !p.steps.empty() && p.steps.front().items.width > 0)
        item_metric = metrics::metric_name(p.steps.front().items.metric);
    for (const auto& c : band.importance_vs_random)
      fmt::print("  importance - random ({}, {}) at {:.0f}%: {:+.4f} [{:+.4f}, {:+.4f}]: {}\n", unit,
                 item_metric, 100 * c.fraction, c.difference.score, c.difference.interval.low,
                 c.difference.interval.high, c.verdict.text);
  }
}

int run_analyze_heads(const AnalyzeHeads& c, const GlobalOptions& global) {
  analysis::HeadsExperimentOptions o;
  o.model = c.model;
  o.run = c.run;
  o.data = c.data.data;
  o.data2 = c.data.data2;
  o.score_data = c.score_data;
  o.read_data = heads_data_reader(c.data);
  o.batch_size = c.data.batch_size;
  o.score_examples = c.data.score_examples;
  o.fractions = parse_fractions(c.fractions);
  o.exact = c.exact;
  o.min_heads = c.min_heads;
  o.ablation = !c.no_ablation;
  o.seed = global.seed;
  o.random_orders = c.random_orders;
  if (c.run.empty()) {
    // Every metric pass kept in OUT/passes.jsonl as it ends: a killed analysis resumes there.
    o.pass_store = (std::filesystem::path(c.out) / "passes.jsonl").string();
    o.pass_settings = fmt::format("tokenizer {}, max-length {}, batch-size {}, beams {}, length-penalty {}",
                                  c.data.tokenizer.empty() ? "the model's" : c.data.tokenizer,
                                  c.data.max_length, c.data.batch_size, c.data.beams, c.data.length_penalty);
  }
  const auto e = analysis::run_heads_experiment(o, bars(global.quiet));
  const auto written = report::write_heads_outputs(e, c.out);
  if (!global.quiet && e.run.empty()) {
    if (e.cross_data)
      fmt::print("importance correlation {} vs {}: pearson {:.3f}, spearman {:.3f}\n", c.data.data,
                 c.data.data2, e.cross_data->correlation.pearson, e.cross_data->correlation.spearman);
    const auto& r = e.analysis;
    if (r.passes_loaded > 0)
      fmt::print("resumed: {} of the {} metric passes were done by an earlier process ({})\n", r.passes_loaded,
                 r.passes_stored, o.pass_store);
    fmt::print("{} baseline {:.4f}", r.metric_name, r.ablation.baseline);
    if (r.baseline_loss)
      fmt::print(" (loss {:.4f}, perplexity {:.2f})", *r.baseline_loss, std::exp(*r.baseline_loss));
    fmt::print("\n");
    print_statistics(r);
  }
  if (!global.quiet) fmt::print("wrote {} in {}\n", fmt::join(written, ", "), c.out);
  return 0;
}

struct PruneCommand {
  std::string model, out, heads, importance, format;
  double fraction = -1;
  int64_t min_heads = 1;
  DataOptions data;
};

int run_prune(const PruneCommand& c, const GlobalOptions& global) {
  analysis::PruneOptions o;
  o.model = c.model;
  o.out = c.out;
  o.format = c.format;
  if (!c.heads.empty()) {
    nlohmann::json parsed;
    try {
      parsed = nlohmann::json::parse(c.heads);
    } catch (const nlohmann::json::exception&) {
      throw Error("--heads: not JSON (expected {\"layer\": [heads]} or {\"site\": {\"layer\": [heads]}})");
    }
    o.heads_by_site = models::site_heads_from_json(parsed, "--heads");  // unpruned numbering, as HF
  }
  o.fraction = c.fraction;
  o.min_heads = c.min_heads;
  o.importance_file = c.importance;
  o.data = c.data.data;
  o.read_data = heads_data_reader(c.data);
  o.batch_size = c.data.batch_size;
  o.score_examples = c.data.score_examples;
  const auto r = analysis::prune_model(o, bars(global.quiet));
  if (!global.quiet) {
    // One site: its pruned heads as config.json records them; several: by site.
    nlohmann::json pruned = models::head_indices_to_json(r.pruned_heads);
    if (r.pruned_by_site.size() > 1) {
      pruned = nlohmann::json::object();
      for (const auto& [site, heads] : r.pruned_by_site) pruned[site] = models::head_indices_to_json(heads);
    }
    fmt::print("pruned {} of {} heads ({}); parameters {} -> {}; wrote {} ({} format)\n",
               r.heads_before - r.heads_after, r.heads_before, pruned.dump(), r.parameters_before,
               r.parameters_after, c.out, r.format);
  }
  return 0;
}

}  // namespace

void register_heads_commands(CLI::App& app, GlobalOptions& global) {
  auto* analyze_app = app.get_subcommand("analyze");
  auto c = std::make_shared<AnalyzeHeads>();
  auto* cmd = analyze_app->add_subcommand(
      "heads",
      "head importance, single-head and all-but-one ablations and the pruning profile (Michel et "
      "al. 2019) of a sequence classifier on labelled data (metric: accuracy), or of a causal "
      "language model such as GPT-2 on plain text (loss: next-token cross entropy; metric: "
      "next-token accuracy), or of an encoder-decoder on translation pairs at its three attention "
      "sites (loss: target cross entropy; metric: corpus BLEU of decodes); writes heads.json, SVGs, section.json");
  cmd->add_option("--model", c->model,
                  "model directory (attnkit or Hugging Face layout), .gguf file, checkpoint or run directory's "
                  "best checkpoint, with a classifier, else a causal LM head, or an encoder-decoder "
                  "(translation pairs)");
  cmd->add_option("--run", c->run, "run directory: every checkpoint's importance and profile over steps");
  add_data_options(cmd, c->data);
  cmd->add_option("--data2", c->data.data2, "second data file: correlation of the two importance maps");
  cmd->add_option("--score-data", c->score_data,
                  "importance (and the pruning orders) from this file, every metric on --data: heads "
                  "chosen on one text, judged on another");
  cmd->add_option("--fractions", c->fractions, "pruning steps in percent, e.g. 5,10,20,50 (default 10,20,...,100)");
  cmd->add_flag("--exact", c->exact, "re-score the importance after each pruning step");
  cmd->add_option("--min-heads", c->min_heads, "heads kept in every layer")
      ->check(at_least(0))
      ->capture_default_str();
  cmd->add_flag("--no-ablation", c->no_ablation, "skip the 2·heads ablation passes");
  cmd->add_option("--random-orders", c->random_orders,
                  "random pruning orders (seeds --seed, --seed + 1, ...) of heads, and of key/value "
                  "groups where the model has them: their mean ± sd per step, and the "
                  "importance order against them (1 = a single random order)")
      ->capture_default_str();
  cmd->add_option("--out", c->out,
                  "output directory; with --model it keeps every metric pass in OUT/passes.jsonl as "
                  "it ends, and the same command resumes a killed analysis from it")
      ->required();
  cmd->callback([c, &global] { global.action = [c, &global] { return run_analyze_heads(*c, global); }; });

  auto p = std::make_shared<PruneCommand>();
  auto* prune = app.add_subcommand(
      "prune",
      "remove attention heads physically (rows of Q/K/V, columns of the output projection) and "
      "write the smaller model; config.json records pruned_heads as Hugging Face does");
  prune->add_option("--model", p->model,
                    "model directory (attnkit or Hugging Face layout), .gguf file, checkpoint or run directory")
      ->required();
  prune->add_option("--out", p->out, "output directory")->required();
  prune->add_option("--heads", p->heads,
                    "heads to remove, JSON {\"layer\": [heads]} (unpruned numbering), or per attention "
                    "site {\"encoder.self\": {...}, \"decoder.self\": {...}, \"decoder.cross\": {...}}");
  prune->add_option("--fraction", p->fraction, "fraction of all heads to remove, least important first")
      ->check(CLI::Range(0.0, 1.0));
  prune->add_option("--importance", p->importance, "heads.json of attnkit analyze heads (for --fraction)");
  prune->add_option("--min-heads", p->min_heads, "heads kept in every layer")
      ->check(at_least(0))
      ->capture_default_str();
  prune->add_option("--format", p->format, "output layout (default: the input's)")
      ->check(CLI::IsMember({"attnkit", "huggingface"}));
  add_data_options(prune, p->data);
  prune->callback([p, &global] { global.action = [p, &global] { return run_prune(*p, global); }; });
}

}  // namespace attnkit::cli
