#include "attnkit/analysis/heads.h"

#include "attnkit/error.h"
#include "attnkit/io/atomic_file.h"
#include "attnkit/models/prediction_metrics.h"
#include "attnkit/progress.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <numeric>
#include <random>

namespace attnkit::analysis {
namespace {

using models::AttentionSite;

void tick(ProgressReporter* progress) {
  if (progress) progress->tick();
}

// Gates from a mask (rows as head_rows), per site, in the model's parameter dtype.
std::vector<std::vector<at::Tensor>> gates_of(const std::vector<models::AttentionSiteRef>& sites,
                                              const HeadMask& mask, bool requires_grad) {
  std::vector<std::vector<at::Tensor>> gates(sites.size());
  std::vector<at::ScalarType> dtypes;
  for (const auto& site : sites) dtypes.push_back(site.stack->parameters().front().scalar_type());
  const auto rows = head_rows(sites);
  for (size_t r = 0; r < rows.size(); ++r) {
    at::Tensor g = torch::tensor(mask[r], torch::kDouble).to(dtypes[rows[r].site]);
    if (requires_grad) g.requires_grad_(true);
    gates[rows[r].site].push_back(g);
  }
  return gates;
}

void apply_gates(const std::vector<models::AttentionSiteRef>& sites,
                 const std::vector<std::vector<at::Tensor>>& gates) {
  for (size_t s = 0; s < sites.size(); ++s) sites[s].set_head_gates(gates[s]);
}

void clear_gates(const std::vector<models::AttentionSiteRef>& sites) {
  for (const auto& site : sites) site.set_head_gates({});
}

void zero_grad(const std::vector<models::AttentionSiteRef>& sites) {
  for (const auto& site : sites) site.stack.ptr()->zero_grad();
}

void check_mask(const std::vector<models::AttentionSiteRef>& sites, const HeadMask& mask) {
  const HeadMask full = full_mask(sites);
  bool ok = mask.size() == full.size();
  for (size_t r = 0; ok && r < full.size(); ++r) ok = mask[r].size() == full[r].size();
  if (!ok) throw Error("head analysis: the mask does not match the model's heads per layer");
}

// A mask as the PassStore's key: its rows' values, "," within a row, "|" between rows.
std::string mask_key(const HeadMask& mask) {
  std::string key;
  for (size_t r = 0; r < mask.size(); ++r) {
    if (r > 0) key += '|';
    for (size_t h = 0; h < mask[r].size(); ++h) key += fmt::format(h > 0 ? ",{}" : "{}", mask[r][h]);
  }
  return key;
}

double evaluate(HeadTask& task, const HeadMask& mask) {
  torch::NoGradGuard no_grad;
  apply_gates(task.sites, gates_of(task.sites, mask, false));
  const double metric = task.passes ? task.passes->evaluate(mask_key(mask)) : task.metric();
  clear_gates(task.sites);
  return metric;
}

// JSON has no NaN or infinity (nlohmann writes null): a pass's non-finite numbers are stored as
// the strings "nan", "inf" and "-inf" and read back as such.
nlohmann::json stored_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

double read_number(const nlohmann::json& j) {
  if (!j.is_string()) return j.get<double>();
  const std::string text = j.get<std::string>();
  if (text == "nan") return std::numeric_limits<double>::quiet_NaN();
  if (text == "inf") return std::numeric_limits<double>::infinity();
  if (text == "-inf") return -std::numeric_limits<double>::infinity();
  throw Error(fmt::format("\"{}\" is not a number", text));
}

nlohmann::json pass_json(const std::string& key, const MetricPass& pass) {
  nlohmann::json j = {{"mask", key}, {"metric", stored_number(pass.metric)}, {"loss", nullptr},
                      {"cpu_s", pass.cpu_seconds}};
  if (pass.loss) j["loss"] = stored_number(*pass.loss);
  nlohmann::json values = nlohmann::json::array();
  for (double v : pass.items.values) values.push_back(stored_number(v));
  j["items"] = {{"metric", static_cast<int>(pass.items.metric)}, {"width", pass.items.width},
                {"values", std::move(values)}};
  return j;
}

MetricPass pass_from_json(const nlohmann::json& j) {
  MetricPass pass;
  pass.metric = read_number(j.at("metric"));
  pass.cpu_seconds = j.value("cpu_s", 0.0);
  if (!j.at("loss").is_null()) pass.loss = read_number(j.at("loss"));
  const auto& items = j.at("items");
  pass.items.metric = static_cast<metrics::SummedMetric>(items.at("metric").get<int>());
  pass.items.width = items.at("width").get<size_t>();
  for (const auto& v : items.at("values")) pass.items.values.push_back(read_number(v));
  return pass;
}

struct Ranked {
  double score;
  int64_t layer, head;
};

}  // namespace

std::vector<HeadRow> head_rows(const std::vector<models::AttentionSiteRef>& sites) {
  std::vector<HeadRow> rows;
  for (size_t s = 0; s < sites.size(); ++s)
    for (int64_t l = 0; l < sites[s].layers(); ++l) rows.push_back({int64_t(s), l});
  return rows;
}

std::vector<SiteRows> site_rows(const std::vector<models::AttentionSiteRef>& sites) {
  std::vector<SiteRows> out;
  int64_t row = 0;
  for (const auto& site : sites) {
    out.push_back({site.name, site.layers(), row});
    row += site.layers();
  }
  return out;
}

HeadMask full_mask(const std::vector<models::AttentionSiteRef>& sites) {
  HeadMask mask;
  for (const auto& site : sites)
    for (int64_t heads : site.heads_per_layer()) mask.emplace_back(heads, 1.0);
  return mask;
}

HeadMask full_mask(const models::TransformerModelImpl& model) {
  HeadMask mask;
  for (int64_t heads : model.heads_per_layer()) mask.emplace_back(heads, 1.0);
  return mask;
}

void set_head_gates(const std::vector<models::AttentionSiteRef>& sites, const HeadMask& mask) {
  if (mask.empty()) return clear_gates(sites);
  check_mask(sites, mask);
  apply_gates(sites, gates_of(sites, mask, false));
}

int64_t count_heads(const HeadMask& mask, double value) {
  int64_t n = 0;
  for (const auto& layer : mask)
    for (double g : layer) n += g == value;
  return n;
}

namespace {

models::TaskInputs batch_inputs(const at::Tensor& input_ids, const at::Tensor& mask, int64_t start,
                                int64_t count) {
  models::TaskInputs in;
  in.input_ids = input_ids.narrow(0, start, count);
  in.attention_mask = mask.narrow(0, start, count);
  return in;
}

// The loss of a task's batch from the model's output: (output, first row, rows).
using BatchLoss = std::function<at::Tensor(const models::TaskOutput&, int64_t, int64_t)>;

// What every task shares: the model, its scoring batches (the first `score_examples` rows, 0 =
// all, batch_size at a time) and their forward with head contexts, whose loss is `loss_of`'s.
HeadTask scoring_task(models::TaskModel task_model, const at::Tensor& input_ids,
                      const at::Tensor& mask, int64_t batch_size, int64_t score_examples,
                      BatchLoss loss_of) {
  const int64_t N = input_ids.size(0);
  const int64_t scored = score_examples > 0 ? std::min(score_examples, N) : N;
  HeadTask task;
  task.sites = task_model->attention_sites();
  task.batches = (scored + batch_size - 1) / batch_size;
  task.loss = [=](int64_t index) mutable {
    task_model->eval();
    const int64_t start = index * batch_size, count = std::min(batch_size, scored - start);
    auto in = batch_inputs(input_ids, mask, start, count);
    in.output_head_contexts = true;
    auto out = task_model->forward(in);
    HeadLoss result;
    result.loss = loss_of(out, start, count);
    result.head_contexts = out.base.head_contexts;
    result.tokens = in.attention_mask->ne(0).sum().item<int64_t>();
    return result;
  };
  return task;
}

// Per row of the batches added (logits [rows, ..., classes] against labels [rows, ...], counted
// where the label is not kIgnoreLabel): counted positions, correct argmax and the summed cross
// entropy (natural log) over them. The items of the profiles' paired bootstrap.
class RowSums {
 public:
  void add(const at::Tensor& logits, const at::Tensor& labels, bool with_loss) {
    const int64_t rows = labels.dim() == 0 ? 1 : labels.size(0), classes = logits.size(-1);
    const at::Tensor flat = labels.reshape({rows, -1}).to(at::kLong);
    const at::Tensor counted = flat.ne(models::kIgnoreLabel);
    const at::Tensor right = logits.argmax(-1).reshape({rows, -1}).eq(flat).logical_and(counted);
    append(counted_, counted.sum(1));
    append(correct_, right.sum(1));
    if (with_loss)
      append(nll_, at::cross_entropy_loss(logits.reshape({-1, classes}), flat.reshape({-1}), {},
                                          at::Reduction::None, models::kIgnoreLabel)
                       .to(at::kDouble)
                       .reshape({rows, -1})
                       .sum(1));
  }
  // Rows with a counted position: correct of counted.
  metrics::ItemStatistics accuracy() const {
    std::vector<double> correct, total;
    for (size_t i = 0; i < counted_.size(); ++i)
      if (counted_[i] > 0) correct.push_back(correct_[i]), total.push_back(counted_[i]);
    return metrics::accuracy_item_statistics(correct, total);
  }
  // Rows with a counted position: summed cross entropy and counted positions.
  metrics::ItemStatistics perplexity() const {
    std::vector<double> nll, tokens;
    for (size_t i = 0; i < counted_.size(); ++i)
      if (counted_[i] > 0) nll.push_back(std::max(0.0, nll_[i])), tokens.push_back(counted_[i]);
    return metrics::perplexity_item_statistics(nll, tokens);
  }

 private:
  static void append(std::vector<double>& out, const at::Tensor& values) {
    const at::Tensor v = values.to(at::kDouble).contiguous();
    out.insert(out.end(), v.data_ptr<double>(), v.data_ptr<double>() + v.numel());
  }
  std::vector<double> counted_, correct_, nll_;
};

// Next-token targets of a causal LM over real tokens only: t and t + 1 both real.
at::Tensor real_next_token_targets(const at::Tensor& input_ids, const at::Tensor& mask) {
  return models::next_token_targets(input_ids, mask).masked_fill(mask.eq(0), models::kIgnoreLabel);
}

}  // namespace

HeadTask classification_task(models::TaskModel task_model, const at::Tensor& input_ids,
                             const at::Tensor& attention_mask, const at::Tensor& labels,
                             int64_t batch_size, int64_t score_examples) {
  if (task_model->heads().sequence_labels <= 0)
    throw Error("head analysis: the model has no sequence classifier (sequence_labels = 0)");
  if (!input_ids.defined() || input_ids.dim() != 2 || labels.dim() != 1 ||
      labels.size(0) != input_ids.size(0) || input_ids.size(0) == 0)
    throw Error("head analysis: expected input_ids [N, n] and labels [N] with N > 0");
  if (batch_size <= 0) throw Error("head analysis: batch size must be positive");
  const int64_t N = input_ids.size(0);
  const at::Tensor mask = attention_mask.defined() ? attention_mask : torch::ones_like(input_ids);
  HeadTask task = scoring_task(task_model, input_ids, mask, batch_size, score_examples,
                               [labels](const models::TaskOutput& out, int64_t start, int64_t count) {
                                 return models::cross_entropy(out.sequence_logits,
                                                              labels.narrow(0, start, count));
                               });
  auto last_items = std::make_shared<metrics::ItemStatistics>();
  task.metric = [=]() mutable {
    task_model->eval();
    torch::NoGradGuard no_grad;
    models::PredictionMetrics metrics;
    RowSums rows;
    for (int64_t start = 0; start < N; start += batch_size) {
      const int64_t count = std::min(batch_size, N - start);
      auto out = task_model->forward(batch_inputs(input_ids, mask, start, count));
      metrics.add_predictions(out.sequence_logits, labels.narrow(0, start, count));
      rows.add(out.sequence_logits, labels.narrow(0, start, count), false);
    }
    *last_items = rows.accuracy();
    return metrics.accuracy();
  };
  task.metric_items = [last_items] { return *last_items; };
  return task;
}

HeadTask language_model_task(models::TaskModel task_model, const at::Tensor& input_ids,
                             const at::Tensor& attention_mask, int64_t batch_size,
                             int64_t score_examples) {
  if (!task_model->heads().causal_lm)
    throw Error("head analysis: the model has no causal language-model head (causal_lm = false)");
  if (!input_ids.defined() || input_ids.dim() != 2 || input_ids.size(0) == 0 || input_ids.size(1) < 2)
    throw Error("head analysis: expected input_ids [N, n] with N > 0 and n >= 2");
  if (attention_mask.defined() && attention_mask.sizes() != input_ids.sizes())
    throw Error("head analysis: attention_mask must have the shape of input_ids");
  if (batch_size <= 0) throw Error("head analysis: batch size must be positive");
  const int64_t N = input_ids.size(0);
  const at::Tensor mask = attention_mask.defined() ? attention_mask : torch::ones_like(input_ids);
  const at::Tensor targets = real_next_token_targets(input_ids, mask);
  if (!targets.ne(models::kIgnoreLabel).any().item<bool>())
    throw Error("head analysis: no next token to predict (no two consecutive real tokens)");
  HeadTask task = scoring_task(task_model, input_ids, mask, batch_size, score_examples,
                               [targets](const models::TaskOutput& out, int64_t start, int64_t count) {
                                 return models::cross_entropy(out.causal_lm_logits,
                                                              targets.narrow(0, start, count));
                               });
  task.metric_name = "next_token_accuracy";
  // One pass over all windows: correct predictions, counted positions, summed cross entropy.
  auto evaluate_all = [=](RowSums* rows) mutable {
    task_model->eval();
    torch::NoGradGuard no_grad;
    models::PredictionMetrics metrics;
    for (int64_t start = 0; start < N; start += batch_size) {
      const int64_t count = std::min(batch_size, N - start);
      const at::Tensor logits =
          task_model->forward(batch_inputs(input_ids, mask, start, count)).causal_lm_logits;
      metrics.add(logits, targets.narrow(0, start, count));
      if (rows) rows->add(logits, targets.narrow(0, start, count), true);
    }
    return metrics;
  };
  // The metric's pass also gives the loss and the per-window statistics (the profiles record the
  // perplexity and the items at every step).
  auto last_loss = std::make_shared<double>(std::nan(""));
  auto last_items = std::make_shared<metrics::ItemStatistics>();
  task.metric = [=]() mutable {
    RowSums rows;
    const models::PredictionMetrics metrics = evaluate_all(&rows);
    *last_loss = metrics.mean_loss();
    *last_items = rows.perplexity();
    return metrics.accuracy();
  };
  task.metric_loss = [last_loss] { return *last_loss; };
  task.metric_items = [last_items] { return *last_items; };
  task.evaluation_loss = [=]() mutable { return evaluate_all(nullptr).mean_loss(); };
  return task;
}

HeadTask translation_task(models::EncoderDecoderModel model, const TranslationData& data,
                          std::function<double()> metric, const std::string& metric_name,
                          int64_t batch_size, int64_t score_examples,
                          std::function<metrics::ItemStatistics()> metric_items) {
  const auto& d = data;
  const bool shapes = d.source_ids.defined() && d.source_ids.dim() == 2 && d.source_mask.defined() &&
                      d.source_mask.sizes() == d.source_ids.sizes() && d.decoder_input_ids.defined() &&
                      d.decoder_input_ids.dim() == 2 && d.decoder_mask.defined() &&
                      d.decoder_mask.sizes() == d.decoder_input_ids.sizes() && d.labels.defined() &&
                      d.labels.sizes() == d.decoder_input_ids.sizes() &&
                      d.source_ids.size(0) == d.labels.size(0) && d.labels.size(0) > 0;
  if (!shapes)
    throw Error("head analysis: expected source_ids / source_mask [N, S] and decoder_input_ids / "
                "decoder_mask / labels [N, L] with N > 0");
  if (!d.labels.ne(models::kIgnoreLabel).any().item<bool>())
    throw Error("head analysis: no target token to predict");
  if (batch_size <= 0) throw Error("head analysis: batch size must be positive");
  const int64_t N = d.labels.size(0);
  const int64_t scored = score_examples > 0 ? std::min(score_examples, N) : N;
  auto forward = [model, d](int64_t start, int64_t count, bool contexts) mutable {
    model->eval();
    auto rows = [&](const at::Tensor& t) { return t.narrow(0, start, count); };
    if (contexts)
      return model->forward_with_head_contexts(rows(d.source_ids), rows(d.decoder_input_ids),
                                               rows(d.source_mask), rows(d.decoder_mask));
    models::EncoderDecoderModelImpl::HeadContextsOutput out;
    out.logits = model->forward(rows(d.source_ids), rows(d.decoder_input_ids), rows(d.source_mask),
                                rows(d.decoder_mask));
    return out;
  };
  HeadTask task;
  task.sites = model->attention_sites();
  task.batches = (scored + batch_size - 1) / batch_size;
  task.metric_name = metric ? metric_name : "token_accuracy";
  task.loss = [=](int64_t index) mutable {
    const int64_t start = index * batch_size, count = std::min(batch_size, scored - start);
    auto out = forward(start, count, true);
    const at::Tensor labels = d.labels.narrow(0, start, count);
    HeadLoss result;
    result.loss = models::cross_entropy(out.logits, labels);
    result.head_contexts = std::move(out.head_contexts);
    result.tokens = labels.ne(models::kIgnoreLabel).sum().item<int64_t>();
    return result;
  };
  auto evaluate_all = [=](RowSums* rows) mutable {
    torch::NoGradGuard no_grad;
    models::PredictionMetrics metrics;
    for (int64_t start = 0; start < N; start += batch_size) {
      const int64_t count = std::min(batch_size, N - start);
      const at::Tensor logits = forward(start, count, false).logits;
      metrics.add(logits, d.labels.narrow(0, start, count));
      if (rows) rows->add(logits, d.labels.narrow(0, start, count), false);
    }
    return metrics;
  };
  if (metric) {
    task.metric = metric;
    task.metric_items = metric_items;
  } else {
    auto last_items = std::make_shared<metrics::ItemStatistics>();
    task.metric = [=]() mutable {
      RowSums rows;
      const double accuracy = evaluate_all(&rows).accuracy();
      *last_items = rows.accuracy();
      return accuracy;
    };
    task.metric_items = [last_items] { return *last_items; };
  }
  task.evaluation_loss = [=]() mutable { return evaluate_all(nullptr).mean_loss(); };
  return task;
}

std::vector<std::vector<int64_t>> head_groups(const std::vector<models::AttentionSiteRef>& sites) {
  std::vector<std::vector<int64_t>> out;
  for (const auto& row : head_rows(sites)) {
    const auto& site = sites[static_cast<size_t>(row.site)];
    const auto attention = site.stack->attention(row.layer, site.attention);
    std::vector<int64_t> groups = attention->kv_of_head();
    if (!attention->grouped())
      for (int64_t h = 0; h < attention->heads(); ++h) groups.push_back(h);
    out.push_back(std::move(groups));
  }
  return out;
}

namespace {

int64_t group_count(const std::vector<int64_t>& groups) {
  return groups.empty() ? 0 : *std::max_element(groups.begin(), groups.end()) + 1;
}

void normalize(HeadTable& table, const ImportanceOptions& options) {
  if (options.normalize_layers)
    for (auto& layer : table) {
      double norm = 0;
      for (double v : layer) norm += v * v;
      norm = std::sqrt(norm);
      for (double& v : layer) v /= norm + 1e-20;
    }
  if (options.min_max) {
    double lo = INFINITY, hi = -INFINITY;
    for (const auto& layer : table)
      for (double v : layer) lo = std::min(lo, v), hi = std::max(hi, v);
    for (auto& layer : table)
      for (double& v : layer) v = hi > lo ? (v - lo) / (hi - lo) : 0.0;
  }
}

}  // namespace

HeadImportance head_importance(HeadTask& task, const HeadMask& mask, const ImportanceOptions& options,
                               ProgressReporter* progress) {
  check_mask(task.sites, mask);
  const auto groups = head_groups(task.sites);
  const bool grouped = std::any_of(groups.begin(), groups.end(), [](const auto& g) {
    return static_cast<int64_t>(g.size()) != group_count(g);
  });
  const int64_t batches = options.max_batches > 0 ? std::min(options.max_batches, task.batches)
                                                  : task.batches;
  HeadImportance out;
  out.raw = out.gate_gradient = HeadTable(mask.size());
  for (size_t l = 0; l < mask.size(); ++l)
    out.raw[l].assign(mask[l].size(), 0.0), out.gate_gradient[l].assign(mask[l].size(), 0.0);
  if (grouped) {
    out.group_raw = HeadTable(mask.size());
    for (size_t l = 0; l < mask.size(); ++l) out.group_raw[l].assign(group_count(groups[l]), 0.0);
  }
  for (int64_t b = 0; b < batches; ++b) {
    auto site_gates = gates_of(task.sites, mask, true);
    apply_gates(task.sites, site_gates);
    std::vector<at::Tensor> gates;  // per row
    for (const auto& per_site : site_gates) gates.insert(gates.end(), per_site.begin(), per_site.end());
    zero_grad(task.sites);
    HeadLoss loss = task.loss(b);
    if (loss.head_contexts.size() != mask.size())
      throw Error("head analysis: the task's forward returned no head contexts per layer");
    for (auto& c : loss.head_contexts) c.retain_grad();
    loss.loss.backward();
    for (size_t l = 0; l < mask.size(); ++l) {
      const at::Tensor& ctx = loss.head_contexts[l];
      if (mask[l].empty()) continue;
      // [B, H, n, dv]: per token Σ_d ctx · ∂L/∂ctx, its absolute value summed over tokens (the
      // gate ξ = 1 or 0 multiplies ctx after it is recorded, so a masked head's grad is 0).
      at::Tensor grad = ctx.grad();
      at::Tensor per_token = grad.defined() ? (ctx.detach() * grad).sum(-1).abs() : ctx.new_zeros({});
      at::Tensor per_head = grad.defined() ? per_token.sum(at::IntArrayRef{0, 2}).to(at::kDouble)
                                           : torch::zeros({int64_t(mask[l].size())}, torch::kDouble);
      at::Tensor gate_grad = gates[l].grad().defined() ? gates[l].grad().abs().to(at::kDouble)
                                                       : torch::zeros_like(per_head);
      for (size_t h = 0; h < mask[l].size(); ++h) {
        out.raw[l][h] += per_head[h].item<double>();
        out.gate_gradient[l][h] += gate_grad[h].item<double>();
      }
      if (grouped && grad.defined()) {  // the group's heads summed inside the absolute value
        const at::Tensor signed_token = (ctx.detach() * grad).sum(-1);  // [B, H, n]
        const at::Tensor index = at::tensor(groups[l], at::kLong).to(signed_token.device());
        at::Tensor per_group = signed_token.new_zeros(
            {signed_token.size(0), group_count(groups[l]), signed_token.size(2)});
        per_group.index_add_(1, index, signed_token);
        const at::Tensor totals = per_group.abs().sum(at::IntArrayRef{0, 2}).to(at::kDouble);
        for (int64_t g = 0; g < totals.size(0); ++g) out.group_raw[l][g] += totals[g].item<double>();
      }
    }
    out.tokens += loss.tokens;
    ++out.batches;
    tick(progress);
  }
  clear_gates(task.sites);
  zero_grad(task.sites);
  for (size_t l = 0; l < mask.size(); ++l)
    for (size_t h = 0; h < mask[l].size(); ++h) {
      if (out.tokens > 0) out.raw[l][h] /= double(out.tokens);
      if (out.batches > 0) out.gate_gradient[l][h] /= double(out.batches);
    }
  for (auto& layer : out.group_raw)
    for (double& v : layer)
      if (out.tokens > 0) v /= double(out.tokens);
  out.importance = out.raw;
  normalize(out.importance, options);
  out.group_importance = out.group_raw;
  normalize(out.group_importance, options);
  return out;
}

PassStore::PassStore(std::string path, std::string settings) : path_(std::move(path)) {
  std::ifstream in(path_);
  if (!in) {  // a new store: its settings line first
    const auto parent = std::filesystem::path(path_).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent);
    io::write_file_atomically(path_, nlohmann::json{{"settings", settings}}.dump() + "\n");
    return;
  }
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  const auto bad = [&](size_t i, const std::string& why) {
    return Error(fmt::format("{}:{}: {} (remove the file to start the analysis over)", path_, i + 1, why));
  };
  nlohmann::json head = nlohmann::json::parse(lines.empty() ? "" : lines[0], nullptr, false);
  if (head.is_discarded() || !head.is_object() || !head.contains("settings") || !head["settings"].is_string())
    throw bad(0, "not a pass store of `attnkit analyze heads` (no settings line)");
  if (const std::string stored = head["settings"].get<std::string>(); stored != settings) {
    // The first part ("; "-separated: model, data, options) that differs.
    const auto parts = [](const std::string& text) {
      std::vector<std::string> out;
      for (size_t at = 0;;) {
        const size_t next = text.find("; ", at);
        out.push_back(text.substr(at, next == std::string::npos ? std::string::npos : next - at));
        if (next == std::string::npos) return out;
        at = next + 2;
      }
    };
    const auto a = parts(stored), b = parts(settings);
    size_t i = 0;
    while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
    throw bad(0, fmt::format("its passes were computed with other settings ({}; now {})",
                             i < a.size() ? a[i] : "", i < b.size() ? b[i] : ""));
  }
  size_t good = 1;
  for (size_t i = 1; i < lines.size(); ++i) {
    try {
      const auto j = nlohmann::json::parse(lines[i]);
      passes_[j.at("mask").get<std::string>()] = pass_from_json(j);
      good = i + 1;
    } catch (const std::exception& e) {
      if (i + 1 < lines.size()) throw bad(i, fmt::format("not a metric pass ({})", e.what()));
    }
  }
  loaded_ = int64_t(passes_.size());
  if (good < lines.size()) {  // a torn last line (the process was killed while writing it): dropped
    in.close();
    std::string kept;
    for (size_t i = 0; i < good; ++i) kept += lines[i] + "\n";
    io::write_file_atomically(path_, kept);
  }
}

const MetricPass* PassStore::find(const std::string& key) const {
  const auto it = passes_.find(key);
  return it == passes_.end() ? nullptr : &it->second;
}

void PassStore::add(const std::string& key, const MetricPass& pass) {
  std::ofstream out(path_, std::ios::app);
  out << pass_json(key, pass).dump() << '\n';
  if (!out.flush()) throw Error(fmt::format("{}: cannot append a metric pass", path_));
  passes_[key] = pass;
}

double PassStore::evaluate(const std::string& key) {
  if (const MetricPass* found = find(key)) {
    latest = *found;
    ++recalled_;
    return latest.metric;
  }
  MetricPass pass;
  const std::clock_t start = std::clock();
  pass.metric = metric();
  if (metric_loss) pass.loss = metric_loss();
  if (metric_items) pass.items = metric_items();
  pass.cpu_seconds = double(std::clock() - start) / CLOCKS_PER_SEC;
  latest = pass;
  add(key, pass);
  return pass.metric;
}

void attach_pass_store(HeadTask& task, const std::string& path, const std::string& settings) {
  auto store = std::make_shared<PassStore>(path, settings);
  store->metric = task.metric;
  store->metric_loss = task.metric_loss;
  store->metric_items = task.metric_items;
  // Every metric call outside a keyed pass still goes through the store, so that the task's loss
  // and items are always those of the latest pass.
  task.metric = [store] {
    MetricPass pass;
    pass.metric = store->metric();
    if (store->metric_loss) pass.loss = store->metric_loss();
    if (store->metric_items) pass.items = store->metric_items();
    store->latest = pass;
    return pass.metric;
  };
  if (task.metric_loss) task.metric_loss = [store] { return store->latest.loss.value_or(0.0); };
  if (task.metric_items) task.metric_items = [store] { return store->latest.items; };
  task.passes = std::move(store);
}

HeadAblation head_ablation(HeadTask& task, ProgressReporter* progress) {
  const HeadMask full = full_mask(task.sites);
  HeadAblation out;
  // Each pass's items, right after its metric (the task gives the latest pass's).
  const auto pass = [&](const HeadMask& mask) {
    const double metric = evaluate(task, mask);
    if (task.metric_items) out.items.push_back(task.metric_items());
    tick(progress);
    return metric;
  };
  out.baseline = pass(full);
  out.single = out.drop = out.all_but_one = HeadTable(full.size());
  for (size_t l = 0; l < full.size(); ++l)
    for (size_t h = 0; h < full[l].size(); ++h) {
      HeadMask one = full;
      one[l][h] = 0.0;
      out.single[l].push_back(pass(one));
      out.drop[l].push_back(out.baseline - out.single[l].back());
      HeadMask keep = full;
      std::fill(keep[l].begin(), keep[l].end(), 0.0);
      keep[l][h] = 1.0;
      out.all_but_one[l].push_back(pass(keep));
    }
  return out;
}

const char* to_string(PruningOrder order) {
  switch (order) {
    case PruningOrder::Importance: return "importance";
    case PruningOrder::Random: return "random";
    case PruningOrder::Reverse: return "reverse";
  }
  return "?";
}

PruningStep unpruned_step(HeadTask& task) {
  PruningStep out;
  out.metric = evaluate(task, full_mask(task.sites));
  out.pruned_by_site.assign(task.sites.size(), 0);
  if (task.metric_loss) out.loss = task.metric_loss();
  if (task.metric_items) out.items = task.metric_items();
  return out;
}

PruningProfile pruning_profile(HeadTask& task, const PruningOptions& options,
                               ProgressReporter* progress, const PruningStep* baseline) {
  std::vector<double> fractions = options.fractions;
  if (fractions.empty())
    for (int i = 1; i <= 10; ++i) fractions.push_back(i / 10.0);
  for (size_t i = 0; i < fractions.size(); ++i)
    if (!(fractions[i] > 0 && fractions[i] <= 1) || (i > 0 && fractions[i] <= fractions[i - 1]))
      throw Error(fmt::format("pruning profile: fractions must increase within (0, 1] (got {})",
                              fractions[i]));
  if (options.min_heads_per_layer < 0)
    throw Error("pruning profile: the minimum heads per layer must be >= 0");
  HeadMask mask = full_mask(task.sites);
  const auto rows = head_rows(task.sites);
  // The units pruned: heads, or key/value groups (the query heads of each group).
  const auto groups = head_groups(task.sites);
  std::vector<std::vector<std::vector<int64_t>>> units(mask.size());  // row -> unit -> heads
  for (size_t l = 0; l < mask.size(); ++l) {
    if (options.groups) {
      units[l].resize(static_cast<size_t>(group_count(groups[l])));
      for (size_t h = 0; h < groups[l].size(); ++h) units[l][static_cast<size_t>(groups[l][h])].push_back(int64_t(h));
    } else {
      for (size_t h = 0; h < mask[l].size(); ++h) units[l].push_back({int64_t(h)});
    }
  }
  auto unit_kept = [&](size_t l, size_t u) { return mask[l][static_cast<size_t>(units[l][u].front())] != 0.0; };
  // Heads masked per site.
  auto by_site = [&]() {
    std::vector<int64_t> counts(task.sites.size(), 0);
    for (size_t r = 0; r < rows.size(); ++r)
      counts[rows[r].site] += std::count(mask[r].begin(), mask[r].end(), 0.0);
    return counts;
  };
  int64_t total = 0;
  for (const auto& layer : units) total += int64_t(layer.size());
  PruningProfile profile;
  profile.order = options.order;
  profile.seed = options.seed;
  profile.exact = options.exact;
  profile.groups = options.groups;
  // A step from the latest metric pass: its metric, loss and items.
  auto step = [&](double fraction, int64_t pruned, double metric) {
    PruningStep out{fraction, pruned, metric, by_site(), std::nullopt, {}};
    if (task.metric_loss) out.loss = task.metric_loss();
    if (task.metric_items) out.items = task.metric_items();
    return out;
  };
  profile.steps.push_back(baseline ? *baseline : step(0.0, 0, evaluate(task, mask)));
  profile.masks.push_back(mask);
  tick(progress);

  std::mt19937_64 rng(options.seed);
  HeadTable scores;
  auto score = [&]() {
    if (options.order == PruningOrder::Random) {
      std::uniform_real_distribution<double> u(0.0, 1.0);
      scores = HeadTable(mask.size());
      for (size_t l = 0; l < mask.size(); ++l)
        for (size_t h = 0; h < units[l].size(); ++h) scores[l].push_back(u(rng));
    } else {
      const bool unpruned = profile.steps.size() == 1 && options.initial_importance;
      HeadImportance importance =
          unpruned ? *options.initial_importance : head_importance(task, mask, options.importance);
      scores = options.groups && !importance.group_importance.empty() ? importance.group_importance
                                                                      : importance.importance;
      if (options.order == PruningOrder::Reverse)
        for (auto& layer : scores)
          for (double& v : layer) v = -v;
    }
  };
  score();
  for (double fraction : fractions) {
    if (options.exact && profile.steps.size() > 1 && options.order != PruningOrder::Random) score();
    const int64_t target = std::min<int64_t>(total, std::llround(fraction * double(total)));
    std::vector<Ranked> candidates;
    int64_t pruned = 0;
    for (size_t l = 0; l < units.size(); ++l)
      for (size_t u = 0; u < units[l].size(); ++u) {
        if (unit_kept(l, u)) candidates.push_back({scores[l][u], int64_t(l), int64_t(u)});
        else ++pruned;
      }
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const Ranked& a, const Ranked& b) { return a.score < b.score; });
    for (const auto& c : candidates) {
      if (pruned >= target) break;
      int64_t kept = 0;
      for (size_t u = 0; u < units[c.layer].size(); ++u) kept += unit_kept(c.layer, u) ? 1 : 0;
      if (kept <= options.min_heads_per_layer) continue;
      for (int64_t h : units[c.layer][c.head]) mask[c.layer][h] = 0.0;
      ++pruned;
    }
    const double metric = evaluate(task, mask);
    profile.steps.push_back(step(double(pruned) / double(total), pruned, metric));
    profile.masks.push_back(mask);
    tick(progress);
  }
  return profile;
}

namespace {

// One stack's self attention as a site (for the single-stack overloads).
models::AttentionSiteRef self_attention_site(const models::TransformerModelImpl& model) {
  auto self = std::const_pointer_cast<models::TransformerModelImpl>(
      std::static_pointer_cast<const models::TransformerModelImpl>(model.shared_from_this()));
  return {"self", models::TransformerModel(self), AttentionSite::Self};
}

// Depths one block serves (ALBERT's shared blocks serve several consecutive depths).
int64_t depths_per_block(const models::TransformerConfig& c) {
  return c.share_layers ? c.layers / c.layer_groups : 1;
}

}  // namespace

std::vector<models::HeadIndices> heads_to_prune(const std::vector<models::AttentionSiteRef>& sites,
                                                const HeadTable& importance, double fraction,
                                                int64_t min_heads_per_layer) {
  if (!(fraction >= 0 && fraction <= 1))
    throw Error(fmt::format("prune: fraction must be in [0, 1] (got {})", fraction));
  const auto rows = head_rows(sites);
  if (importance.size() != rows.size())
    throw Error("prune: the importance table does not match the model's layers");
  // Score per (site, block) and head: with shared blocks, the largest importance over the depths
  // it serves (a head goes only where it is unimportant at every depth).
  struct Block {
    int64_t site, block;
    std::vector<double> scores;
  };
  std::vector<Block> blocks;
  std::vector<size_t> first_block(sites.size());
  for (size_t s = 0; s < sites.size(); ++s) {
    first_block[s] = blocks.size();
    const auto heads = sites[s].heads_per_layer();
    const int64_t per_block = depths_per_block(sites[s].stack->config());
    for (int64_t b = 0; b < sites[s].stack->block_count(); ++b)
      blocks.push_back({int64_t(s), b, std::vector<double>(heads[b * per_block], -INFINITY)});
  }
  const HeadMask full = full_mask(sites);  // heads per row now
  for (size_t r = 0; r < rows.size(); ++r) {
    const auto& site = sites[rows[r].site];
    const int64_t l = rows[r].layer, heads = int64_t(full[r].size());
    if (int64_t(importance[r].size()) != heads)
      throw Error(fmt::format("prune: {}layer {}: {} importances for {} heads",
                              sites.size() > 1 ? site.name + " " : "", l, importance[r].size(), heads));
    auto& block = blocks[first_block[rows[r].site] + l / depths_per_block(site.stack->config())];
    for (int64_t h = 0; h < heads; ++h) block.scores[h] = std::max(block.scores[h], importance[r][h]);
  }
  int64_t total = 0;
  std::vector<Ranked> candidates;  // layer = index into blocks
  for (size_t b = 0; b < blocks.size(); ++b)
    for (int64_t h = 0; h < int64_t(blocks[b].scores.size()); ++h) {
      candidates.push_back({blocks[b].scores[h], int64_t(b), h});
      ++total;
    }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Ranked& a, const Ranked& b) { return a.score < b.score; });
  const int64_t target = std::llround(fraction * double(total));
  std::vector<int64_t> kept(blocks.size());
  for (size_t b = 0; b < blocks.size(); ++b) kept[b] = int64_t(blocks[b].scores.size());
  std::vector<models::HeadIndices> out(sites.size());
  int64_t pruned = 0;
  for (const auto& cand : candidates) {
    if (pruned >= target) break;
    if (kept[cand.layer] <= min_heads_per_layer) continue;
    const auto& block = blocks[cand.layer];
    out[block.site][block.block].push_back(cand.head);
    --kept[cand.layer];
    ++pruned;
  }
  for (auto& site : out)
    for (auto& [b, list] : site) std::sort(list.begin(), list.end());
  return out;
}

models::HeadIndices heads_to_prune(const models::TransformerModelImpl& model,
                                   const HeadTable& importance, double fraction,
                                   int64_t min_heads_per_layer) {
  return heads_to_prune(std::vector<models::AttentionSiteRef>{self_attention_site(model)},
                        importance, fraction, min_heads_per_layer)
      .front();
}

models::HeadIndices to_original_numbering(const models::AttentionSiteRef& site,
                                          const models::HeadIndices& current) {
  models::HeadIndices out;
  for (const auto& [block, list] : current) {
    auto mha = site.layer(block * depths_per_block(site.stack->config()));
    std::vector<int64_t> originals;  // original index of each current head
    for (int64_t h = 0; h < mha->original_heads(); ++h)
      if (!std::binary_search(mha->pruned_heads().begin(), mha->pruned_heads().end(), h))
        originals.push_back(h);
    for (int64_t h : list) {
      if (h < 0 || h >= int64_t(originals.size()))
        throw Error(fmt::format("prune: layer {}: head {} outside [0, {})", block, h, originals.size()));
      out[block].push_back(originals[h]);
    }
  }
  return out;
}

models::HeadIndices to_original_numbering(const models::TransformerModelImpl& model,
                                          const models::HeadIndices& current) {
  return to_original_numbering(self_attention_site(model), current);
}

namespace {

std::vector<double> flatten(const HeadTable& t) {
  std::vector<double> out;
  for (const auto& layer : t) out.insert(out.end(), layer.begin(), layer.end());
  return out;
}

double pearson(const std::vector<double>& a, const std::vector<double>& b) {
  const double n = double(a.size());
  const double ma = std::accumulate(a.begin(), a.end(), 0.0) / n;
  const double mb = std::accumulate(b.begin(), b.end(), 0.0) / n;
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    sab += (a[i] - ma) * (b[i] - mb);
    saa += (a[i] - ma) * (a[i] - ma);
    sbb += (b[i] - mb) * (b[i] - mb);
  }
  return saa > 0 && sbb > 0 ? sab / std::sqrt(saa * sbb) : 0.0;
}

// Ranks with ties averaged.
std::vector<double> ranks(const std::vector<double>& v) {
  std::vector<size_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t i, size_t j) { return v[i] < v[j]; });
  std::vector<double> r(v.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && v[order[j + 1]] == v[order[i]]) ++j;
    for (size_t k = i; k <= j; ++k) r[order[k]] = 0.5 * double(i + j);
    i = j + 1;
  }
  return r;
}

nlohmann::json table_json(const HeadTable& t) { return nlohmann::json(t); }

}  // namespace

Correlation importance_correlation(const HeadTable& a, const HeadTable& b) {
  const auto fa = flatten(a), fb = flatten(b);
  if (fa.size() != fb.size() || fa.size() < 2)
    throw Error("importance correlation: the tables differ in shape (or have fewer than 2 heads)");
  return {pearson(fa, fb), pearson(ranks(fa), ranks(fb))};
}

nlohmann::json to_json(const HeadImportance& i) {
  nlohmann::json out = {{"importance", table_json(i.importance)},
                        {"raw", table_json(i.raw)},
                        {"gate_gradient", table_json(i.gate_gradient)},
                        {"batches", i.batches},
                        {"tokens", i.tokens}};
  if (!i.group_raw.empty()) {
    out["group_importance"] = table_json(i.group_importance);
    out["group_raw"] = table_json(i.group_raw);
  }
  return out;
}

nlohmann::json to_json(const HeadAblation& a) {
  return {{"baseline", a.baseline},
          {"single", table_json(a.single)},
          {"drop", table_json(a.drop)},
          {"all_but_one", table_json(a.all_but_one)}};
}

nlohmann::json to_json(const PruningProfile& p, const std::vector<SiteRows>& sites) {
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& s : p.steps) {
    nlohmann::json step{{"fraction", s.fraction}, {"pruned", s.pruned}, {"metric", s.metric}};
    if (s.loss && std::isfinite(*s.loss)) {
      step["loss"] = *s.loss;
      step["perplexity"] = std::exp(*s.loss);
    }
    if (!sites.empty() && s.pruned_by_site.size() == sites.size()) {
      nlohmann::json by_site = nlohmann::json::object();
      for (size_t i = 0; i < sites.size(); ++i) by_site[sites[i].name] = s.pruned_by_site[i];
      step["pruned_by_site"] = by_site;
    }
    steps.push_back(std::move(step));
  }
  nlohmann::json out = {{"order", to_string(p.order)}, {"exact", p.exact}, {"steps", steps}};
  if (p.groups) out["unit"] = "group";
  return out;
}

nlohmann::json to_json(const std::vector<SiteRows>& sites) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& site : sites)
    out.push_back({{"name", site.name}, {"layers", site.layers}, {"first_row", site.first_row}});
  return out;
}

}  // namespace attnkit::analysis
