// Stage "decoding": samples from the language model the training stage trained (greedy and
// top-p, decode/generation.h), what int8 costs it (attnkit eval, float32 against int8), and the
// per-token latency of decoding with the softmax KV cache
// against the constant-size linear / cosFormer recurrent state ("Transformers are RNNs") at
// growing positions, on random GPT-2-shaped models.
#include "attnkit/decode/language_models.h"
#include "attnkit/decode/latency.h"
#include "attnkit/file.h"
#include "attnkit/demo/demo.h"
#include "attnkit/error.h"
#include "attnkit/io/model_directory.h"
#include "attnkit/report/plot.h"
#include "attnkit/runtime.h"
#include "attnkit/text/pretrained.h"
#include "attnkit/text/unicode.h"

#include "cli_runner.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace attnkit::demo {
namespace {

namespace fs = std::filesystem;

// The text on one line, with invalid UTF-8 (a byte-level BPE can stop inside a character) as U+FFFD.
std::string one_line(const std::string& raw) {
  std::string text = text::unicode::encode_utf8(text::unicode::decode_utf8(raw, text::unicode::InvalidUtf8::kReplace));
  std::replace(text.begin(), text.end(), '\n', ' ');
  std::replace(text.begin(), text.end(), '\t', ' ');
  return text;
}

// What int8 costs the training stage's language model, as a user measures it: `attnkit eval` of
// its best checkpoint on the held-out blocks in float32 (--items), then quantized (--compute-type
// int8, as generate quantizes) with the paired bootstrap against the float32 items.
void int8_quality(const StageContext& context, const fs::path& run, report::Section& section) {
  const auto& o = context.options;
  const std::string items = (context.dir / "lm-float32-items.json").string();
  const std::string paired = (context.dir / "lm-int8-vs-float32.json").string();
  const std::vector<std::string> eval = {"--threads", "1", "--quiet", "eval", "--run", run.string(),
                                         "--checkpoint", "best", "--split", "val"};  // the run's held-out blocks
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = eval;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  run_attnkit(o, with({"--items", items}));
  run_attnkit(o, with({"--compute-type", "int8", "--paired-bs", items, "--bs-samples", "1000", "--json", paired}));
  const nlohmann::json r = nlohmann::json::parse(read_file(paired));
  const double f32 = r["b"]["score"].get<double>(), i8 = r["a"]["score"].get<double>();
  const auto& d = r["difference"];
  const double change = i8 / f32 - 1.0;
  const std::string verdict = r["verdict"] == "level" ? "level" : r["verdict"] == "b" ? "int8 worse" : "int8 better";
  report::Table table{"held-out perplexity of the same checkpoint, float32 and int8; int8 − float32 with "
                      "sacreBLEU's paired bootstrap over the held-out blocks (1,000 resamples, 95%)",
                      {"float32", "int8", "int8 / float32", "int8 − float32 [95%]", "verdict"}, {}};
  table.rows.push_back({fmt::format("{:.3f}", f32), fmt::format("{:.3f}", i8), fmt::format("{:+.2f}%", 100 * change),
                        fmt::format("{:+.3f} [{:+.3f}, {:+.3f}]", d["score"].get<double>(), d["low"].get<double>(),
                                    d["high"].get<double>()),
                        verdict});
  section.headlines.push_back({"int8 decoding: the language model's held-out perplexity against float32 (target within 2%)",
                               fmt::format("{:+.2f}%", 100 * change),
                               o.quick ? std::optional<bool>() : std::optional<bool>(std::abs(change) <= 0.02)});
  section.blocks.push_back({"int8 (`generate --compute-type int8`: every attention and feed-forward layer and the LM "
                            "head as per-row int8 weights, activations quantized per row at run time) against float32 "
                            "on that language model, measured as a user would: `attnkit eval --run RUN --checkpoint "
                            "best --split val --items F` (the run's held-out blocks), then the same with `--compute-type int8 "
                            "--paired-bs F`. docs/decoding.md (\"int8\") has the Bible translation model's BLEU and "
                            "SmolLM2-135M's perplexity the same way.", {}, {}});
  section.blocks.push_back({{}, table, {}});
}

}  // namespace

report::Section decoding_stage(const StageContext& context) {
  const auto& o = context.options;
  torch::NoGradGuard no_grad;
  report::Section section;

  // --- samples from the trained LM -------------------------------------------------------------
  const fs::path lm_dir = o.out / "training";
  const fs::path lm_model = lm_dir / "lm" / "checkpoints" / "best" / "model.safetensors";
  const fs::path lm_tokenizer = lm_dir / "lm-tokenizer.json";
  if (fs::exists(lm_model) && fs::exists(lm_tokenizer)) {
    auto loaded = io::load_model(lm_model.string());
    const auto tokenizer = text::load_tokenizer(lm_tokenizer.string());
    const std::vector<std::string> prompts = {"The computer", "Linux is", "A scientist"};
    std::vector<std::vector<int64_t>> ids;
    for (const auto& p : prompts) {
      const auto enc = tokenizer.encode(p, false);
      ids.emplace_back(enc.ids.begin(), enc.ids.end());
    }
    auto text_of = [&](const decode::Hypothesis& h) {
      const std::vector<uint32_t> ids(h.tokens.begin(), h.tokens.end());
      return one_line(tokenizer.decode(ids, true, text::TextStyle::kReadable));
    };
    decode::GenerationConfig greedy;
    greedy.max_new_tokens = o.quick ? 12 : 30;
    greedy.no_repeat_ngram_size = 3;
    decode::GenerationConfig top_p = greedy;
    top_p.strategy = decode::Strategy::Sample;
    top_p.top_p = 0.9;
    top_p.temperature = 0.8;
    top_p.seed = o.seed;
    const auto model = decode::start_decoding(*loaded.task, {}).session;
    const auto g = decode::generate(*model, ids, greedy);
    const auto s = decode::generate(*model, ids, top_p);
    report::Table samples{fmt::format("continuations of {} new tokens (no repeated 3-grams); top-p: p = 0.9, "
                                      "temperature 0.8, seed {}",
                                      greedy.max_new_tokens, o.seed),
                          {"prompt", "greedy", "top-p sample"}, {}};
    for (size_t i = 0; i < prompts.size(); ++i)
      samples.rows.push_back({prompts[i], text_of(g[i].front()), text_of(s[i].front())});
    section.blocks.push_back({"The GPT-2-style language model of the training stage (fortune files, its own "
                              "byte-level BPE), decoded with its KV cache (decode::generate, Hugging Face "
                              "generate's semantics).", {}, {}});
    section.blocks.push_back({{}, samples, {}});
    int8_quality(context, lm_dir / "lm", section);
  } else {
    section.blocks.push_back({fmt::format("No trained language model in {} (run the training stage first), so "
                                          "there are no samples.", lm_dir.string()), {}, {}});
  }

  // --- per-token latency: KV cache vs RNN state --------------------------------------------------
  const int64_t layers = o.quick ? 2 : 6, hidden = o.quick ? 128 : 384, heads = o.quick ? 4 : 6,
                vocab = 2000, steps = o.quick ? 4 : 8;
  const std::vector<int64_t> positions = o.quick ? std::vector<int64_t>{16, 64, 256}
                                                 : std::vector<int64_t>{64, 256, 1024, 4096};
  const std::vector<std::string> kinds = {"softmax", "linear:elu", "cosformer"};
  std::vector<double> xs(positions.begin(), positions.end());
  report::LinePlot plot{fmt::format("Per-token decoding latency vs position ({} layers, width {}, batch 1, 1 thread)", layers, hidden),
                        "position (tokens before the new one)", "ms per token", true};
  plot.log_x = true;
  report::Table table{"median time of one decoding step after a prefill of `position` tokens, and the state held",
                      {"attention", "state"}, {}};
  for (int64_t p : positions) table.columns.push_back(fmt::format("t = {} (ms)", p));
  table.columns.push_back(fmt::format("state at t = {}", positions.back()));
  std::map<std::string, std::vector<decode::TokenLatency>> measured;
  // One thread: a batch-1 step is a chain of small matrix-vector products. With the libraries'
  // default spin-waits, two threads made steps on the 2-core machine jump between 2 and 25 ms;
  // with attnkit's (src/process_start.cpp), three runs on two threads took 2.3-4.0 ms per step,
  // the same point varying by up to ±20%, and two on one thread 3.8-5.4 ms, mostly within a few
  // percent (restored below).
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  set_blas_threads(1);
  for (const auto& kind : kinds) {
    const auto model = decode::random_causal_lm(kind, layers, hidden, heads, vocab, positions.back() + steps + 1);
    std::vector<double> ys;
    for (int64_t p : positions) {
      measured[kind].push_back(decode::token_latency(model, p, steps));
      ys.push_back(measured[kind].back().ms_per_token);
      if (!o.quiet) fmt::print(stderr, "{} at t = {}: {:.2f} ms/token\n", kind, p, ys.back());
    }
    plot.series.push_back({kind == "softmax" ? "softmax, KV cache" : kind + ", RNN state", xs, ys});
    std::vector<std::string> row = {kind, kind == "softmax" ? "KV cache" : "RNN state"};
    for (double y : ys) row.push_back(fmt::format("{:.2f}", y));
    const double bytes = static_cast<double>(measured[kind].back().state_bytes);
    row.push_back(bytes < 1048576.0 ? fmt::format("{:.1f} KiB", bytes / 1024) : fmt::format("{:.1f} MiB", bytes / 1048576));
    table.rows.push_back(row);
  }
  at::set_num_threads(threads);
  set_blas_threads(threads);
  const double softmax_last = measured["softmax"].back().ms_per_token;
  for (const std::string kind : {"linear:elu", "cosformer"}) {
    const auto& m = measured[kind];
    const double growth = m.back().ms_per_token / m.front().ms_per_token;
    section.headlines.push_back(
        {fmt::format("{} RNN state: latency at t = {} / t = {} (target <= 1.2), and vs softmax KV at t = {}", kind,
                     positions.back(), positions.front(), positions.back()),
         fmt::format("{:.2f}x; {:.2f}x faster", growth, softmax_last / m.back().ms_per_token),
         o.quick ? std::optional<bool>() : std::optional<bool>(growth <= 1.2 && m.back().ms_per_token < softmax_last)});
  }
  section.blocks.push_back({fmt::format(
      "Random GPT-2-shaped models ({} layers, width {}, {} heads, vocabulary {}), batch 1, one thread, greedy "
      "steps after a prefill of t tokens, median of {} steps. Softmax attention keeps every key and value (its cache and its "
      "cost grow with t); linear attention and cosFormer keep S = sum phi(k) vT and z = sum phi(k) (cosFormer: a "
      "cos and a sin copy), so a step costs the same at any position (Katharopoulos et al. 2020). `make bench` "
      "runs the GPT-2-small-shaped comparison.",
      layers, hidden, heads, vocab, steps), {}, {}});
  section.blocks.push_back({{}, {}, report::Figure{"ms per token vs position (log-log)", report::render_svg(plot)}});
  section.blocks.push_back({{}, table, {}});
  return section;
}

}  // namespace attnkit::demo
