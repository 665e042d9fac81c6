#include "task_common.h"

#include "attnkit/error.h"
#include "attnkit/io/gguf_model.h"
#include "attnkit/io/model_directory.h"
#include "attnkit/text/pretrained.h"
#include "attnkit/train/memory_budget.h"
#include "attnkit/train/tasks.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <sstream>

namespace attnkit::train {
namespace detail {

void check_init_stack(const std::string& path, const models::TransformerConfig& stack, int64_t vocab,
                      int64_t longest) {
  if (vocab > stack.vocab_size)
    throw Error(fmt::format("model.init {}: the tokenizer has {} ids but the model's vocabulary {}", path,
                            vocab, stack.vocab_size));
  if (stack.positions == layers::PositionEncoding::Learned && longest > stack.max_positions)
    throw Error(fmt::format("model.init {}: inputs of {} tokens exceed the model's {} positions "
                            "(lower task.truncate)", path, longest, stack.max_positions));
}

namespace {

// A class-conditional task's model (heads.condition_classes > 0) gets Conditional LayerNorm with
// condition vectors of the hidden size where `c` has none (its condition maps start at zero, so
// a loaded model computes what it did until training moves them).
models::TransformerConfig with_condition(models::TransformerConfig c, const models::HeadsConfig& heads) {
  if (heads.condition_classes > 0 && c.condition_size == 0) c.condition_size = c.hidden;
  return c;
}

// `c` as TransformerModel::unshare leaves it (when `unshare`): one block per layer.
models::TransformerConfig unshared(models::TransformerConfig c, bool unshare) {
  if (unshare) {
    c.share_layers = false;
    c.layer_groups = 1;
  }
  return c;
}

// The task's model started from a model directory: its architecture (with any pruned heads) and
// every tensor of the same name and shape, the task's other heads freshly initialised. Prints one
// line saying what was loaded and what is new.
models::TaskModel init_model(const std::string& directory, int64_t vocab, int64_t longest,
                             const models::HeadsConfig& task_heads, int64_t token_types,
                             const TrainerOptions& options, bool unshare) {
  // The loaded model is no larger than its weights file (io refuses a config that describes more);
  // training it needs the copies below, checked before the task's model is built.
  auto loaded = io::load_model(directory);
  // A language-model head the model already has keeps its own tying: an untied output matrix
  // (Llama 3, Qwen2, Mistral) is loaded and trained, not replaced by the word embeddings.
  models::HeadsConfig heads = task_heads;
  if ((heads.causal_lm && loaded.heads.causal_lm) || (heads.masked_lm && loaded.heads.masked_lm))
    heads.tie_lm = loaded.heads.tie_lm;
  auto c = with_condition(loaded.config, heads);
  // A pooled classifier over a checkpoint without a pooler (a BertForMaskedLM, RobertaForMaskedLM)
  // gets a fresh one, as transformers initialises BertPooler / RoBERTa's classifier.dense.
  if (heads.next_sentence > 0 || (heads.sequence_labels > 0 && heads.sequence_pooling == models::Pooling::Pooler))
    c.pooler = true;
  check_init_stack(directory, c, vocab, longest);
  if (token_types > std::max<int64_t>(c.type_vocab_size, 1))
    throw Error(fmt::format("model.init {}: the task uses {} token types, the model has {}",
                            directory, token_types, c.type_vocab_size));
  if (unshare && !c.share_layers)
    throw Error(fmt::format("model.unshare: model.init {} does not share its layers (only an ALBERT-shared "
                            "model can be un-shared)", directory));
  check_training_memory(unshared(c, unshare), heads, options, fmt::format("model.init {}", directory),
                        memory_budget());
  models::TaskModel model(c, heads);
  auto source = loaded.task->named_parameters(true);
  auto source_buffers = loaded.task->named_buffers(true);
  int64_t count = 0, values = 0;
  std::vector<std::string> fresh;
  torch::NoGradGuard no_grad;
  auto copy = [&](const std::string& name, at::Tensor& target,
                  const torch::OrderedDict<std::string, at::Tensor>& from) {
    const auto* value = from.find(name);
    if (value == nullptr || value->sizes() != target.sizes()) return false;
    target.copy_(*value);
    ++count;
    values += target.numel();
    return true;
  };
  for (auto& p : model->named_parameters(true))
    if (!copy(p.key(), p.value(), source)) fresh.push_back(p.key());
  for (auto& b : model->named_buffers(true)) copy(b.key(), b.value(), source_buffers);
  fmt::print(stderr, "init: {} tensors ({} values) from {} ({} layout); new: {}\n", count, values,
             directory, loaded.format, fresh.empty() ? std::string("none") : fmt::format("{}", fmt::join(fresh, ", ")));
  return model;
}

// The size settings of a model built from settings, as the memory refusal names them.
std::string model_settings_text(const RunConfig& config, const models::TransformerConfig& c) {
  const auto& m = config.model;
  std::string text = fmt::format("model.layers = {}, model.hidden = {}, model.intermediate = {}{}", m.layers,
                                 m.hidden, c.intermediate, m.intermediate == 0 ? " (4 x hidden)" : "");
  if (m.embedding_size > 0) text += fmt::format(", model.embedding_size = {}", m.embedding_size);
  if (m.key_size > 0) text += fmt::format(", model.key_size = {}", m.key_size);
  if (m.value_size > 0) text += fmt::format(", model.value_size = {}", m.value_size);
  if (c.positions == layers::PositionEncoding::Learned || m.max_positions > 0)
    text += fmt::format(", model.max_positions = {}{}", c.max_positions, m.max_positions == 0 ? " (from the data)" : "");
  return text + fmt::format(", vocabulary {}", c.vocab_size);
}

}  // namespace

models::TaskModel build_model(const RunConfig& config, int64_t vocab, int64_t longest, bool causal,
                              const models::HeadsConfig& heads, int64_t token_types,
                              std::optional<int64_t> pad_token_id) {
  torch::manual_seed(config.trainer.seed);  // the initial weights follow the run seed
  const bool unshare = config.model.unshare;
  if (!config.model.init.empty()) {
    auto model = init_model(config.model.init, vocab, longest, heads, token_types, config.trainer, unshare);
    if (unshare) {
      model->transformer->unshare();
      fmt::print(stderr, "init: un-shared the ALBERT layers (model.unshare): {} blocks\n",
                 model->transformer->block_count());
    }
    return model;
  }
  auto c = with_condition(model_config(config, vocab, longest, causal), heads);
  c.type_vocab_size = token_types;
  if (pad_token_id) c.set_pad_token_id(*pad_token_id);
  if (unshare && !c.share_layers)
    throw Error(fmt::format("model.unshare: model.family '{}' does not share its layers (only an ALBERT-shared "
                            "model can be un-shared)", c.family.name()));
  check_training_memory(unshared(c, unshare), heads, config.trainer, model_settings_text(config, c), memory_budget());
  models::TaskModel model(c, heads);
  if (unshare) model->transformer->unshare();
  return model;
}

models::HeadsConfig classification_heads(const RunConfig& config, int64_t labels) {
  models::HeadsConfig heads;
  heads.sequence_labels = labels;
  heads.sequence_pooling = config.model.pooling.value();
  heads.classifier_dropout = config.model.dropout;
  return heads;
}

text::Tokenizer task_tokenizer(const RunConfig& config) {
  // Fine-tuning from a model directory: its tokenizer unless another is named. A run directory
  // (or a checkpoint's model.safetensors) names the checkpoint folder io::load_model reads.
  if (config.task.tokenizer.empty() && !config.model.init.empty()) {
    namespace fs = std::filesystem;
    fs::path model = io::resolve_model_path(config.model.init);
    if (io::is_gguf_file(model.string())) return io::load_tokenizer(model.string());  // its metadata's
    if (!fs::is_directory(model)) model = model.parent_path();
    if (auto found = text::find_tokenizer(model.string())) return *found;
    return text::load_tokenizer(config.model.init);  // its error names what is missing
  }
  if (config.task.tokenizer.empty())
    throw Error(fmt::format("task '{}' needs task.tokenizer (a tokenizer.json, vocab.txt or a "
                            "directory with one)", config.task.name));
  return io::load_tokenizer(config.task.tokenizer);
}

int64_t pad_id(const text::Tokenizer& tokenizer) {
  for (const char* name : {"[PAD]", "<pad>", "<|endoftext|>"})
    if (auto id = tokenizer.token_to_id(name)) return *id;
  return 0;
}

std::optional<int64_t> special_id(const text::Tokenizer& tokenizer, std::initializer_list<const char*> names) {
  for (const char* name : names)
    if (auto id = tokenizer.token_to_id(name)) return *id;
  return std::nullopt;
}

data::DataReadOptions read_options(const RunConfig& config) {
  data::DataReadOptions options;
  options.skip_bad_lines = config.task.skip_bad_lines;
  return options;
}

void report_skipped(const std::string& what, const data::DataReadStats& stats) {
  if (stats.skipped == 0) return;
  fmt::print(stderr, "{}: skipped {} bad line(s) (task.skip_bad_lines), e.g. {}\n", what, stats.skipped,
             stats.skipped_messages.empty() ? std::string("?") : stats.skipped_messages.front());
}

std::pair<std::vector<TranslationPair>, std::vector<TranslationPair>> encoded_pair_files(
    const RunConfig& config, const text::Tokenizer& tokenizer, const std::string& task,
    bool source_special_tokens) {
  const auto& t = config.task;
  const auto options = read_options(config);
  auto read = [&](const std::string& p) { return data::read_seq2seq_tsv(p, options); };
  auto train = encode_translation_pairs(read_reported<data::Seq2SeqData>(t.data, read), tokenizer,
                                        source_special_tokens);
  auto val = encode_translation_pairs(
      read_reported<data::Seq2SeqData>(evaluation_path(t.data, t.eval_split), read), tokenizer,
      source_special_tokens, t.eval_examples);
  if (train.empty() || val.empty())
    throw Error(fmt::format("task '{}': no pair of {} or its evaluation file has tokens on both sides", task, t.data));
  return {std::move(train), std::move(val)};
}

std::string evaluation_path(const std::string& train_path, const std::string& split) {
  std::string path = train_path;
  const auto at = path.rfind("train");
  if (at == std::string::npos)
    throw Error(fmt::format("{}: the file name must contain 'train' (the validation file replaces "
                            "it with 'val', the test file with 'test')",
                            train_path));
  return path.replace(at, 5, split);
}

data::LanguageModelData read_text_files(const RunConfig& config, const text::Tokenizer& tokenizer, size_t block,
                                  std::optional<int64_t> separator, size_t* files, const std::string& split) {
  const auto& t = config.task;
  std::vector<std::string> paths;
  std::string path;
  std::istringstream list(t.data);
  while (std::getline(list, path, ','))
    if (!path.empty()) paths.push_back(split.empty() ? path : evaluation_path(path, split));
  if (files) *files = paths.size();
  data::LanguageModelDataOptions options;
  options.block_size = block;
  options.threads = 0;
  options.skip_bad_lines = t.skip_bad_lines;
  if (separator) options.end_of_text_id = static_cast<uint32_t>(*separator);
  auto data = data::read_language_model_data(paths, tokenizer, options);
  report_skipped(t.data, data.stats);
  return data;
}

TextBlocks text_blocks(const RunConfig& config, const text::Tokenizer& tokenizer, int64_t block,
                       std::optional<int64_t> separator) {
  const auto& t = config.task;
  if (block < 1) throw Error(fmt::format("task '{}': task.truncate {} leaves no room for text", t.name, t.truncate));
  size_t files = 0;
  const auto data = read_text_files(config, tokenizer, static_cast<size_t>(block), separator, &files);
  const size_t tokens = data.tokens - (separator ? files : 0);
  if (tokens == 0) throw Error(fmt::format("task '{}': {} holds no text (an empty corpus)", t.name, t.data));
  // read_language_model_data's blocks carry one token more (the last one's LM target); here the
  // blocks are its first `block` tokens, so N tokens make floor((N - 1) / block) blocks.
  std::vector<Ids> blocks;
  for (const auto& b : data.blocks) blocks.emplace_back(b.begin(), b.end() - 1);
  if (blocks.size() < 2)
    throw Error(fmt::format("task '{}': {} tokens make {} block(s) of {}; need at least 2 (one for validation): "
                            "add text or lower task.truncate",
                            t.name, data.tokens, blocks.size(), block));
  TextBlocks out;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const bool held_out = i % 20 == 19 && static_cast<int64_t>(out.val.size()) < t.eval_examples;
    (held_out ? out.val : out.train).push_back(std::move(blocks[i]));
  }
  if (out.val.empty()) {
    out.val.push_back(std::move(out.train.back()));
    out.train.pop_back();
  }
  return out;
}

void check_model_size_settings(const ModelSettings& m) {
  constexpr int64_t kLargest = int64_t{1} << 40;
  for (const auto& [name, value] : {std::pair<const char*, int64_t>{"hidden", m.hidden}, {"layers", m.layers},
                                    {"heads", m.heads}, {"intermediate", m.intermediate},
                                    {"embedding_size", m.embedding_size}, {"max_positions", m.max_positions},
                                    {"key_size", m.key_size}, {"value_size", m.value_size}})
    if (value > kLargest) throw Error(fmt::format("model.{}: {} is larger than 2^40", name, value));
  for (const auto& [name, value] : {std::pair<const char*, int64_t>{"key_size", m.key_size}, {"value_size", m.value_size}})
    if (value < 0) throw Error(fmt::format("model.{}: {} must be at least 1 (0 = hidden / heads)", name, value));
}

}  // namespace detail

models::TransformerConfig model_config(const RunConfig& config, int64_t vocab, int64_t longest,
                                       bool causal) {
  const auto& m = config.model;
  detail::check_model_size_settings(m);
  if (m.family->encoder_decoder)  // "transformer": task translation's encoder-decoder
    throw Error(fmt::format("model.family: '{}' is not one of {}", one_line(m.family.text()),
                            fmt::join(models::preset_names(), ", ")));
  const models::ModelFamily family =
      m.family->preset.value_or(causal ? models::ModelFamily::Gpt2 : models::ModelFamily::Bert);
  models::TransformerConfig c =
      models::preset(family, {vocab, m.hidden, m.layers, m.heads, m.intermediate, m.embedding_size});
  c.type_vocab_size = 0;
  c.pooler = m.pooling.value() == models::Pooling::Pooler && !causal;
  c.attention = m.attention.value();
  c.attention.causal = causal;
  if (m.key_size > 0) c.attention.key_size = m.key_size;
  if (m.value_size > 0) c.attention.value_size = m.value_size;
  c.positions = m.positions.value();
  c.dropout = m.dropout;
  c.max_positions = m.max_positions > 0 ? m.max_positions : std::max<int64_t>(longest, 16);
  c.attention.max_length = c.max_positions;  // Synthesizer logits span the longest input
  c.validate();
  return c;
}

using detail::ModelTask;

models::TaskModel task_model(TrainingTask& task) {
  auto* model_task = dynamic_cast<ModelTask*>(&task);
  if (!model_task) throw Error("task_model: not a task made by make_task");
  return model_task->model();
}

}  // namespace attnkit::train
