#include "attnkit/analysis/linearize.h"

#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/models/encoder_decoder.h"
#include "attnkit/models/model_factory.h"
#include "attnkit/models/quantize.h"
#include "attnkit/models/task_model.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <set>
#include <utility>

namespace attnkit::analysis {
namespace {

using nlohmann::json;

// The summed head importance of every layer of `sites` in a heads.json, in site order.
std::vector<std::pair<LayerSite, double>> layer_importance(const std::string& path,
                                                           const std::vector<models::AttentionSiteRef>& sites) {
  const HeadTable table = read_heads_importance(path, "--importance");
  json rows;
  try {
    rows = json::parse(read_file(path)).at("sites");
  } catch (const json::exception& e) {
    throw Error(fmt::format("--importance {}: not a heads.json of attnkit analyze heads ({})", path,
                            one_line(e.what())));
  }
  std::vector<std::pair<LayerSite, double>> out;
  for (const auto& site : sites) {
    const json* found = nullptr;
    if (rows.is_array())
      for (const auto& r : rows)
        if (r.is_object() && r.contains("name") && r["name"] == site.name) found = &r;
    if (!found)
      throw Error(fmt::format("--importance {}: no site '{}' (not the importance of this model)", path, site.name));
    const json layers = found->value("layers", json()), first = found->value("first_row", json());
    if (!layers.is_number_integer() || !first.is_number_integer() || layers.get<int64_t>() != site.layers() ||
        first.get<int64_t>() < 0 || first.get<int64_t>() + site.layers() > static_cast<int64_t>(table.size()))
      throw Error(fmt::format("--importance {}: site '{}' has {} layers there, {} in the model", path, site.name,
                              one_line(layers.dump()), site.layers()));
    for (int64_t l = 0; l < site.layers(); ++l) {
      double sum = 0;
      for (double v : table[static_cast<size_t>(first.get<int64_t>() + l)]) sum += v;
      out.push_back({{site.name, l}, sum});
    }
  }
  return out;
}

at::Tensor rows_of(const at::Tensor& t, int64_t begin, int64_t end) {
  return t.defined() ? t.slice(0, begin, end) : t;
}

at::Tensor rows_of(const at::Tensor& t, const at::Tensor& rows) { return t.defined() ? t.index_select(0, rows) : t; }

c10::optional<at::Tensor> optional_tensor(const at::Tensor& t) {
  return t.defined() ? c10::optional<at::Tensor>(t) : c10::nullopt;
}

// The student on some rows of the data (its converted layers keep their transfer losses).
void forward_rows(models::Model& model, const HeadsInputs& in, const at::Tensor& rows) {
  if (model.shape() == models::ModelShape::EncoderDecoder) {
    const auto& t = in.translation;
    model.encoder_decoder("linearize").forward(rows_of(t.source_ids, rows), rows_of(t.decoder_input_ids, rows),
                                               optional_tensor(rows_of(t.source_mask, rows)),
                                               optional_tensor(rows_of(t.decoder_mask, rows)));
    return;
  }
  models::ModelInputs mi;
  mi.input_ids = rows_of(in.input_ids, rows);
  mi.attention_mask = optional_tensor(rows_of(in.attention_mask, rows));
  model.task_model("linearize").transformer->forward(mi);
}

std::vector<double> layer_losses(const Student& student) {
  std::vector<double> out;
  for (const auto& c : student.layers) out.push_back(c.attention->transfer_loss().item<double>());
  return out;
}

// Each converted layer's mean transfer loss over `in`, in batches.
std::vector<double> held_out_losses(Student& student, const HeadsInputs& in, int64_t batch) {
  torch::NoGradGuard no_grad;
  std::vector<double> sums(student.layers.size(), 0.0);
  const int64_t n = input_row_count(in);
  for (int64_t begin = 0; begin < n; begin += batch) {
    const int64_t end = std::min(n, begin + batch);
    forward_rows(*student.model, in, at::arange(begin, end, at::kLong));
    const auto losses = layer_losses(student);
    for (size_t i = 0; i < sums.size(); ++i) sums[i] += losses[i] * double(end - begin);
  }
  for (double& s : sums) s /= double(std::max<int64_t>(n, 1));
  return sums;
}

double sum_of(const std::vector<double>& values) {
  double s = 0;
  for (double v : values) s += v;
  return s;
}

}  // namespace

layers::AttentionSpec linear_family_kind(const std::string& text) {
  const layers::AttentionSpec spec = layers::AttentionSpec::parse(text);
  if (spec.kind != AttentionKind::Linear && spec.kind != AttentionKind::Cosformer)
    throw Error(fmt::format("--kind '{}' is not a linear-family kind (cosformer, linear:elu, linear:relu, "
                            "linear:favor, linear:t2r[:M], linear:hedgehog[:M])",
                            one_line(text)));
  return spec;
}

std::vector<LayerSite> layers_to_convert(const models::Model& model, const std::vector<std::string>& site_names,
                                         const std::vector<int64_t>& layers, int64_t keep_softmax,
                                         const std::string& importance_file) {
  std::vector<models::AttentionSiteRef> sites;
  if (site_names.empty()) sites = model.attention_sites();
  for (const auto& name : site_names) {
    if (std::any_of(sites.begin(), sites.end(), [&](const auto& s) { return s.name == name; }))
      throw Error(fmt::format("--sites: '{}' given twice", name));
    sites.push_back(model.attention_site(name));
  }
  if (keep_softmax >= 0 && !layers.empty()) throw Error("give --layers or --keep-softmax, not both");
  if (keep_softmax >= 0 && importance_file.empty())
    throw Error("--keep-softmax K needs --importance heads.json (attnkit analyze heads --out)");
  for (const auto& site : sites)
    for (int64_t l : layers)
      if (l < 0 || l >= site.layers())
        throw Error(fmt::format("--layers: layer {} outside [0, {}) at {}", l, site.layers(), site.name));
  std::vector<LayerSite> out;
  if (keep_softmax >= 0) {
    auto ranked = layer_importance(importance_file, sites);
    if (keep_softmax > static_cast<int64_t>(ranked.size()))
      throw Error(fmt::format("--keep-softmax {}: the chosen sites have {} layers", keep_softmax, ranked.size()));
    std::vector<size_t> order(ranked.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return ranked[a].second > ranked[b].second; });
    std::set<size_t> kept(order.begin(), order.begin() + keep_softmax);
    for (size_t i = 0; i < ranked.size(); ++i)
      if (!kept.count(i)) out.push_back(ranked[i].first);
    return out;
  }
  for (const auto& site : sites)
    for (int64_t l = 0; l < site.layers(); ++l)
      if (layers.empty() || std::find(layers.begin(), layers.end(), l) != layers.end())
        out.push_back({site.name, l});
  return out;
}

Student make_student(models::Model& teacher, const std::vector<LayerSite>& convert,
                     const layers::AttentionSpec& kind) {
  if (kind.kind != AttentionKind::Linear && kind.kind != AttentionKind::Cosformer)
    throw Error(fmt::format("linearize: '{}' is not a linear-family kind", kind.to_string()));
  if (convert.empty()) throw Error("linearize: no layer to convert");
  if (models::model_compute_type(teacher) != layers::ComputeType::Float32)
    throw Error("linearize: the model is quantized; linearize a float32 model");
  json description = teacher.config_description();
  const bool seq2seq = teacher.shape() == models::ModelShape::EncoderDecoder;
  models::EncoderDecoderConfig seq2seq_config;
  models::TransformerConfig task_config;
  if (seq2seq) seq2seq_config = description.at("encoder_decoder").get<models::EncoderDecoderConfig>();
  else task_config = description.at("model").get<models::TransformerConfig>();
  Student student;
  for (const auto& where : convert) {
    const models::AttentionSiteRef site = teacher.attention_site(where.site);
    if (where.layer < 0 || where.layer >= site.layers())
      throw Error(fmt::format("linearize: layer {} outside [0, {}) at {}", where.layer, site.layers(), site.name));
    models::TransformerConfig& c = !seq2seq ? task_config
                                   : site.name == "encoder.self" ? seq2seq_config.encoder
                                                                 : seq2seq_config.decoder;
    if (c.share_layers)
      throw Error(fmt::format("linearize: {} shares its layers (ALBERT); convert an unshared model", site.name));
    if (c.condition_size > 0)
      throw Error(fmt::format("linearize: {} has Conditional LayerNorm (the data has no conditions)", site.name));
    const bool cross = site.attention == models::AttentionSite::Cross;
    if (cross && kind.kind == AttentionKind::Cosformer)
      throw Error(fmt::format("linearize: cosFormer cross attention has no cached form, so the student could not "
                              "decode; leave {} softmax (--sites) or convert it to a linear:* kind",
                              site.name));
    const layers::AttentionSpec teacher_spec = cross ? c.layer_cross_attention(where.layer) : c.layer_attention(where.layer);
    if (teacher_spec.kind != AttentionKind::Softmax || teacher_spec.talking_heads)
      throw Error(fmt::format("linearize: {} layer {} is '{}', not plain softmax attention", site.name,
                              where.layer, teacher_spec.to_string()));
    layers::AttentionSpec spec = teacher_spec;
    spec.kind = kind.kind;
    spec.feature_map = kind.feature_map;
    spec.mixture.clear();
    spec.scale = 0;  // the softmax settings
    spec.window = 0;
    spec.logit_softcap = 0;
    (cross ? c.layer_cross_attention_specs : c.layer_attention_specs)[where.layer] = spec;
    student.layers.push_back({where, teacher_spec, nullptr});
  }
  if (seq2seq) description["encoder_decoder"] = seq2seq_config;
  else description["model"] = task_config;
  student.model = models::make_model(description, "linearize: the student");
  {
    // Every teacher tensor into the student by name; the new feature maps keep their start.
    torch::NoGradGuard no_grad;
    auto to_parameters = student.model->module().named_parameters(true);
    auto to_buffers = student.model->module().named_buffers(true);
    auto copy_all = [](const torch::OrderedDict<std::string, at::Tensor>& from,
                       torch::OrderedDict<std::string, at::Tensor>& to) {
      for (const auto& item : from) {
        at::Tensor* target = to.find(item.key());
        if (!target) throw Error(fmt::format("linearize: the student has no tensor '{}'", item.key()));
        if (target->sizes() != item.value().sizes())
          throw Error(fmt::format("linearize: '{}' is [{}] in the model, [{}] in the student", item.key(),
                                  fmt::join(item.value().sizes(), ", "), fmt::join(target->sizes(), ", ")));
        target->copy_(item.value());
      }
    };
    copy_all(teacher.module().named_parameters(true), to_parameters);
    copy_all(teacher.module().named_buffers(true), to_buffers);
  }
  student.model->module().eval();
  for (auto& c : student.layers) {
    c.attention = student.model->attention_site(c.where.site).layer(c.where.layer);
    for (auto& p : c.attention->named_parameters(false))
      if (p.key() == "feature_map_weight" || p.key() == "feature_map_bias") student.feature_maps.push_back(p.value());
  }
  return student;
}

int64_t input_row_count(const HeadsInputs& in) {
  if (in.input_ids.defined()) return in.input_ids.size(0);
  return in.translation.source_ids.defined() ? in.translation.source_ids.size(0) : 0;
}

HeadsInputs input_rows(const HeadsInputs& in, int64_t begin, int64_t end) {
  HeadsInputs out;
  out.input_ids = rows_of(in.input_ids, begin, end);
  out.attention_mask = rows_of(in.attention_mask, begin, end);
  out.labels = rows_of(in.labels, begin, end);
  out.label_count = in.label_count;
  const auto& t = in.translation;
  out.translation = {rows_of(t.source_ids, begin, end), rows_of(t.source_mask, begin, end),
                     rows_of(t.decoder_input_ids, begin, end), rows_of(t.decoder_mask, begin, end),
                     rows_of(t.labels, begin, end)};
  return out;
}

TransferResult attention_transfer(Student& student, const HeadsInputs& train, const HeadsInputs& held_out,
                                  const TransferOptions& o) {
  if (o.steps < 0 || o.batch_size < 1 || o.log_every < 1 || !(o.lr > 0))
    throw Error("attention transfer: steps >= 0, batch size and log interval >= 1, lr > 0");
  TransferResult r;
  r.train_examples = input_row_count(train);
  r.eval_examples = input_row_count(held_out);
  if (r.eval_examples == 0) throw Error("attention transfer: no held-out examples");
  r.trained = !student.feature_maps.empty() && o.steps > 0;
  if (r.trained && r.train_examples == 0) throw Error("attention transfer: no training examples");
  r.curves.resize(student.layers.size());
  student.model->module().eval();  // no dropout: the teacher's activations exactly
  for (auto& p : student.model->module().parameters(true)) p.set_requires_grad(false);
  for (auto& c : student.layers) c.attention->set_transfer_teacher(c.teacher);
  r.initial = held_out_losses(student, held_out, o.batch_size);
  if (r.trained) {
    for (auto& p : student.feature_maps) p.set_requires_grad(true);
    r.steps = o.steps;
    torch::manual_seed(o.seed);
    torch::optim::Adam adam(student.feature_maps, torch::optim::AdamOptions(o.lr));
    const int64_t n = r.train_examples, batch = std::min(o.batch_size, n);
    at::Tensor order = at::randperm(n, at::kLong);
    int64_t cursor = 0;
    for (int64_t step = 1; step <= o.steps; ++step) {
      if (cursor + batch > n) {
        order = at::randperm(n, at::kLong);
        cursor = 0;
      }
      const at::Tensor rows = order.slice(0, cursor, cursor + batch);
      cursor += batch;
      adam.zero_grad();
      forward_rows(*student.model, train, rows);
      at::Tensor loss = at::zeros({});
      for (const auto& c : student.layers) loss = loss + c.attention->transfer_loss();
      if (step == 1 || step % o.log_every == 0 || step == o.steps) {
        const auto losses = layer_losses(student);
        for (size_t i = 0; i < losses.size(); ++i) r.curves[i].push_back({step, losses[i]});
        if (o.on_log) o.on_log(step, losses);
      }
      loss.backward();
      adam.step();
    }
    r.final = held_out_losses(student, held_out, o.batch_size);
  } else {
    r.final = r.initial;
  }
  for (auto& c : student.layers) c.attention->set_transfer_teacher(c10::nullopt);
  for (auto& p : student.model->module().parameters(true)) p.set_requires_grad(true);
  return r;
}

json to_json(const Student& student, const TransferResult& r) {
  json layers = json::array();
  std::vector<json> total_curve;
  for (size_t i = 0; i < student.layers.size(); ++i) {
    const auto& c = student.layers[i];
    json curve = json::array();
    for (size_t k = 0; k < r.curves[i].size(); ++k) {
      const auto& p = r.curves[i][k];
      curve.push_back({{"step", p.step}, {"loss", p.loss}});
      if (total_curve.size() <= k) total_curve.push_back({{"step", p.step}, {"loss", 0.0}});
      total_curve[k]["loss"] = total_curve[k]["loss"].get<double>() + p.loss;
    }
    layers.push_back({{"site", c.where.site},
                      {"layer", c.where.layer},
                      {"teacher", c.teacher.to_string()},
                      {"kind", c.attention->options().spec().to_string()},
                      {"curve", curve},
                      {"initial", r.initial[i]},
                      {"final", r.final[i]}});
  }
  return {{"trained", r.trained},
          {"steps", r.steps},
          {"train_examples", r.train_examples},
          {"eval_examples", r.eval_examples},
          {"loss", "mean squared difference of each layer's per-head contexts from its softmax teacher's"},
          {"total", {{"curve", total_curve}, {"initial", sum_of(r.initial)}, {"final", sum_of(r.final)}}},
          {"layers", layers}};
}

}  // namespace attnkit::analysis
