#include "attnkit/train/run_config.h"

#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/parse.h"
#include "attnkit/train/tasks.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <sstream>
#include <string_view>

namespace attnkit::train {
namespace {

struct Setting {
  SettingInfo info;
  std::function<void(RunConfig&, const std::string&)> set;
  std::function<std::string(const RunConfig&)> get;  // as a TOML value
};

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

bool parse_bool(const std::string& name, const std::string& text) {
  if (text == "true" || text == "1") return true;
  if (text == "false" || text == "0") return false;
  throw Error(fmt::format("{}: '{}' is not true or false", name, text));
}

std::string format_double(double v) {
  auto s = fmt::format("{}", v);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // stays a TOML float
  return s;
}

template <typename T, typename Access>
Setting typed(std::string section, std::string key, std::string help, Access access) {
  Setting s;
  s.info = {section, key, help};
  const std::string name = section + "." + key;
  s.set = [access, name](RunConfig& c, const std::string& text) {
    T& field = access(c);
    if constexpr (std::is_same_v<T, int64_t>) field = parse_int(text, name);
    else if constexpr (std::is_same_v<T, double>) field = parse_double(text, name);
    else if constexpr (std::is_same_v<T, bool>) field = parse_bool(name, text);
    else field = text;
  };
  s.get = [access](const RunConfig& c) {
    const T& field = access(const_cast<RunConfig&>(c));
    if constexpr (std::is_same_v<T, int64_t>) return std::to_string(field);
    else if constexpr (std::is_same_v<T, double>) return format_double(field);
    else if constexpr (std::is_same_v<T, bool>) return std::string(field ? "true" : "false");
    else if constexpr (std::is_same_v<T, std::string>) return quote(field);
    else return quote(field.text());  // a ParsedSetting: as written
  };
  return s;
}

#define ATTNKIT_FIELD(T, section, key, help, expr) \
  typed<T>(section, key, help, [](RunConfig& c) -> T& { return expr; })

const std::vector<Setting>& settings() {
  static const std::vector<Setting> all = [] {
    std::vector<Setting> s{
        ATTNKIT_FIELD(std::string, "run", "dir", "run directory (config.toml, metrics.jsonl, checkpoints/)", c.directory),
        ATTNKIT_FIELD(int64_t, "run", "steps", "optimiser updates", c.trainer.steps),
        typed<int64_t>("run", "seed", "random seed (model init, data order, dropout)",
                       [](RunConfig& c) -> int64_t& { return reinterpret_cast<int64_t&>(c.trainer.seed); }),
        ATTNKIT_FIELD(int64_t, "run", "accumulation", "micro-batches per update", c.trainer.accumulation),
        ATTNKIT_FIELD(double, "run", "clip_norm", "global gradient-norm clipping (0 = off)", c.trainer.clip_norm),
        ATTNKIT_FIELD(double, "run", "ema", "EMA decay of the weights (0 = off)", c.trainer.ema_decay),
        ATTNKIT_FIELD(int64_t, "run", "eval_every", "evaluate every N steps (0 = at the end)", c.trainer.eval_every),
        ATTNKIT_FIELD(int64_t, "run", "checkpoint_every", "checkpoint every N steps (0 = at the end)", c.trainer.checkpoint_every),
        ATTNKIT_FIELD(int64_t, "run", "keep_last", "step checkpoints kept besides best", c.trainer.keep_last),
        ATTNKIT_FIELD(int64_t, "run", "log_every", "log every N steps", c.trainer.log_every),
        ATTNKIT_FIELD(double, "run", "cpu_budget",
                      "stop after this many CPU seconds of training steps (0 = off; the lr decays over the budget)",
                      c.trainer.cpu_budget),
        ATTNKIT_FIELD(std::string, "task", "name", task_names(" | "), c.task.name),
        ATTNKIT_FIELD(std::string, "task", "data", "data directory or files (see docs/training.md)", c.task.data),
        ATTNKIT_FIELD(std::string, "task", "tokenizer",
                      "tokenizer file or directory (" + task_names(", ", [](const TaskInfo& t) { return t.tokenizer; }) + ")",
                      c.task.tokenizer),
        ATTNKIT_FIELD(int64_t, "task", "batch_size", "examples per micro-batch", c.task.batch_size),
        ATTNKIT_FIELD(int64_t, "task", "truncate", "longest input in tokens (lm: block size)", c.task.truncate),
        ATTNKIT_FIELD(int64_t, "task", "min_length", "generated examples: shortest length", c.task.min_length),
        ATTNKIT_FIELD(int64_t, "task", "max_length", "generated examples: longest length", c.task.max_length),
        ATTNKIT_FIELD(int64_t, "task", "train_examples", "generated training examples", c.task.train_examples),
        ATTNKIT_FIELD(int64_t, "task", "eval_examples", "validation examples (generated or first N)", c.task.eval_examples),
        ATTNKIT_FIELD(std::string, "task", "eval_split",
                      "evaluation data: val | test (" + task_names(", ", [](const TaskInfo& t) { return t.test_split; }) + ")",
                      c.task.eval_split),
        ATTNKIT_FIELD(bool, "task", "skip_bad_lines", "skip and count bad data lines (default: stop at the first, naming file and line)", c.task.skip_bad_lines),
        ATTNKIT_FIELD(int64_t, "task", "symbols", "synthetic alphabet size", c.task.symbols),
        ATTNKIT_FIELD(double, "task", "mask_probability", "mlm: share of tokens (or words) selected as targets, in (0, 1]", c.task.mask_probability),
        ATTNKIT_FIELD(double, "task", "mask_fraction", "mlm: of the selected, the share replaced by [MASK]", c.task.mask_fraction),
        ATTNKIT_FIELD(double, "task", "random_fraction", "mlm: of the selected, the share replaced by a random token (the rest stay)", c.task.random_fraction),
        ATTNKIT_FIELD(bool, "task", "whole_word", "mlm: select whole words (a WordPiece token and its ## pieces; with task.word_list also Chinese words)", c.task.whole_word),
        ATTNKIT_FIELD(int64_t, "task", "predict_last", "plm: predict only the last K tokens of each factorisation order (0 = all)", c.task.predict_last),
        ATTNKIT_FIELD(bool, "task", "two_stream", "plm: XLNet's two-stream attention (a query stream that knows the position it predicts, not its token)", c.task.two_stream),
        ATTNKIT_FIELD(int64_t, "task", "image_size",
                      "image tasks: lra-pathfinder generated size (0 = 32, or 128), lra-image 0 = 28 or 32 (padded)",
                      c.task.image_size),
        ATTNKIT_FIELD(std::string, "task", "word_list",
                      "mlm: Chinese word list (UTF-8, one word per line) for whole-word masking by longest match; implies whole_word",
                      c.task.word_list),
        ATTNKIT_FIELD(decltype(ModelSettings::family), "model", "family", "bert | albert | gpt2 | roberta (default by task)", c.model.family),
        ATTNKIT_FIELD(int64_t, "model", "hidden", "hidden size", c.model.hidden),
        ATTNKIT_FIELD(int64_t, "model", "layers", "layers", c.model.layers),
        ATTNKIT_FIELD(int64_t, "model", "heads", "attention heads", c.model.heads),
        ATTNKIT_FIELD(int64_t, "model", "intermediate", "feed-forward size (0 = 4 x hidden)", c.model.intermediate),
        ATTNKIT_FIELD(int64_t, "model", "embedding_size", "ALBERT's factorised embedding size (0 = hidden)", c.model.embedding_size),
        ATTNKIT_FIELD(decltype(ModelSettings::attention), "model", "attention", "attention kind, e.g. softmax, linear:elu, cosformer", c.model.attention),
        ATTNKIT_FIELD(decltype(ModelSettings::positions), "model", "positions", "learned | sinusoidal | none", c.model.positions),
        ATTNKIT_FIELD(double, "model", "dropout", "dropout on embeddings and sub-layer outputs", c.model.dropout),
        ATTNKIT_FIELD(int64_t, "model", "max_positions", "position table size (0 = from the data)", c.model.max_positions),
        ATTNKIT_FIELD(decltype(ModelSettings::pooling), "model", "pooling", "classification pooling: pooler | first | last | mean", c.model.pooling),
        ATTNKIT_FIELD(std::string, "model", "init", "model directory to fine-tune from (attnkit or Hugging Face layout; also --init)", c.model.init),
        ATTNKIT_FIELD(bool, "model", "unshare", "ALBERT: give each layer its own copy of the shared block after loading (fine-tune un-shared)", c.model.unshare),
        ATTNKIT_FIELD(int64_t, "model", "key_size", "per-head width of queries and keys (0 = hidden / heads)", c.model.key_size),
        ATTNKIT_FIELD(int64_t, "model", "value_size", "per-head width of values and head contexts (0 = hidden / heads)", c.model.value_size),
        ATTNKIT_FIELD(double, "optimizer", "lr", "peak learning rate", c.trainer.optimizer.learning_rate),
        ATTNKIT_FIELD(double, "optimizer", "weight_decay", "decoupled weight decay (matrices only)", c.trainer.optimizer.weight_decay),
        ATTNKIT_FIELD(double, "optimizer", "beta1", "Adam beta1", c.trainer.optimizer.beta1),
        ATTNKIT_FIELD(double, "optimizer", "beta2", "Adam beta2", c.trainer.optimizer.beta2),
        ATTNKIT_FIELD(double, "optimizer", "eps", "Adam epsilon", c.trainer.optimizer.eps),
        ATTNKIT_FIELD(double, "optimizer", "momentum", "SGD momentum", c.trainer.optimizer.momentum),
        ATTNKIT_FIELD(int64_t, "schedule", "warmup", "linear warm-up steps", c.trainer.schedule.warmup_steps),
        ATTNKIT_FIELD(double, "schedule", "min_ratio", "decay floor as a fraction of the peak rate", c.trainer.schedule.min_ratio),
        ATTNKIT_FIELD(double, "task", "label_smoothing", "translation: label smoothing of the loss, in [0, 1)", c.task.label_smoothing),
        ATTNKIT_FIELD(int64_t, "task", "beams", "translation: validation decoding, 1 = greedy, else beam search", c.task.beams),
        ATTNKIT_FIELD(double, "task", "length_penalty", "translation: beam search length penalty (HF generate)", c.task.length_penalty),
        ATTNKIT_FIELD(bool, "model", "pre_ln", "translation: pre-LN blocks (default post-LN)", c.model.pre_ln),
        ATTNKIT_FIELD(bool, "model", "share_embeddings", "translation: one embedding for source, target and output", c.model.share_embeddings),
        ATTNKIT_FIELD(decltype(ModelSettings::cross_attention), "model", "cross_attention", "translation: cross attention kind (default: model.attention)", c.model.cross_attention),
        ATTNKIT_FIELD(int64_t, "lora", "rank", "LoRA adapters of this rank on every attention layer's projections, every other weight frozen (0 = off; meant for model.init)", c.lora.rank),
        ATTNKIT_FIELD(double, "lora", "alpha", "LoRA scale = alpha / rank", c.lora.alpha),
        ATTNKIT_FIELD(std::string, "lora", "targets", "the projections that get adapters: q, k, v, o, comma-separated", c.lora.targets),
    };
    Setting optimizer;
    optimizer.info = {"optimizer", "name", "adamw | adam | sgd"};
    optimizer.set = [](RunConfig& c, const std::string& v) {
      c.trainer.optimizer.kind = optimizer_kind_from_string(v);
    };
    optimizer.get = [](const RunConfig& c) { return quote(to_string(c.trainer.optimizer.kind)); };
    s.push_back(optimizer);
    Setting schedule;
    schedule.info = {"schedule", "kind", "constant | linear | cosine"};
    schedule.set = [](RunConfig& c, const std::string& v) {
      c.trainer.schedule.kind = schedule_kind_from_string(v);
    };
    schedule.get = [](const RunConfig& c) { return quote(to_string(c.trainer.schedule.kind)); };
    s.push_back(schedule);
    // Keep each section's settings together (to_toml writes every [section] once).
    const std::vector<std::string> order{"run", "task", "model", "optimizer", "schedule", "lora"};
    std::stable_sort(s.begin(), s.end(), [&](const Setting& a, const Setting& b) {
      return std::find(order.begin(), order.end(), a.info.section) <
             std::find(order.begin(), order.end(), b.info.section);
    });
    return s;
  }();
  return all;
}

#undef ATTNKIT_FIELD

const Setting& find_setting(const std::string& section, const std::string& key) {
  for (const auto& s : settings())
    if (s.info.section == section && s.info.key == key) return s;
  throw Error(fmt::format("{}.{}: unknown setting (see attnkit train --help)", section, key));
}

// TOML allows non-ASCII characters only inside strings and comments. toml++ 3.3 (Debian 12) reaches
// __builtin_unreachable (undefined behaviour) when it tests some of them elsewhere for whitespace
// (e.g. U+00E9, U+FCFF: found by fuzz/run_config_fuzz), so they are refused here first, with
// their line. Tracks comments and the four string forms.
void reject_non_ascii_outside_strings(std::string_view text, const std::string& path) {
  size_t line = 1;
  // The last character other than space and tab before this one on its line ('\n' at the start;
  // not 0, which the input may hold: a NUL before a quote was taken for a line start).
  // A quote opens a string only where TOML lets one start: at the start of a line (a key), or
  // after '=', '[', ',', '{' or '.'. Elsewhere (inside a malformed bare value such as
  // `3odropout'''`) toml++ reads on past the quote testing each character as a value terminator,
  // so a non-ASCII character there counts as outside a string (fuzz finding).
  char before = '\n';
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    const char previous = before;
    if (c != ' ' && c != '\t') before = c;
    const bool string_start =
        (c == '"' || c == '\'') && (previous == '\n' ||
                                        (previous != '\0' && std::strchr("=[,{.", previous) != nullptr));
    if (c == '\n') {
      ++line;
      ++i;
    } else if (c == '#') {
      while (i < text.size() && text[i] != '\n') ++i;
    } else if (string_start) {
      const bool multi = text.compare(i, 3, std::string(3, c)) == 0;
      const std::string_view close = multi ? std::string_view(c == '"' ? "\"\"\"" : "\'\'\'") : std::string_view(&text[i], 1);
      i += multi ? 3 : 1;
      while (i < text.size()) {
        if (c == '"' && text[i] == '\\') {
          // A line-ending backslash in a multi-line string: toml++ skips the whitespace after it,
          // testing each character, so no non-ASCII character may follow there either.
          size_t j = i + 1;
          while (j < text.size() && (text[j] == ' ' || text[j] == '\t' || text[j] == '\r')) ++j;
          if (multi && j < text.size() && text[j] == '\n') {
            while (j < text.size() && (text[j] == ' ' || text[j] == '\t' || text[j] == '\r' || text[j] == '\n')) {
              if (text[j] == '\n') ++line;
              ++j;
            }
            if (j < text.size() && static_cast<unsigned char>(text[j]) >= 0x80)
              throw Error(fmt::format("{}:{}: a non-ASCII character right after a line-ending backslash", path, line));
            i = j;
            continue;
          }
          if (i + 1 < text.size() && text[i + 1] == '\n') ++line;
          i += 2;  // an escape: the next character is not the closing quote
          continue;
        }
        if (text[i] == '\n') {
          if (!multi) break;
          ++line;
        }
        if (text.compare(i, close.size(), close) == 0) {
          i += close.size();
          break;
        }
        ++i;
      }
    } else if (static_cast<unsigned char>(c) >= 0x80) {
      throw Error(fmt::format("{}:{}: a non-ASCII character outside a string or comment (byte 0x{:02X}); TOML "
                              "allows them only in strings and comments",
                              path, line, static_cast<unsigned char>(c)));
    } else {
      ++i;
    }
  }
}

// parse(text), its error prefixed with the setting's name.
template <typename Parse>
auto parsed_as(const char* setting, const std::string& text, Parse parse) -> decltype(parse(text)) {
  try {
    return parse(text);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", setting, e.what()));
  }
}

}  // namespace

ModelFamilyChoice parse_model_family_setting(const std::string& text) {
  ModelFamilyChoice choice;
  if (text.empty()) return choice;
  if (text == "transformer") {
    choice.encoder_decoder = true;
    return choice;
  }
  if (!models::is_preset(text))
    throw Error(fmt::format("model.family: '{}' is not one of {}", one_line(text),
                            fmt::join(models::preset_names(), ", ")));
  choice.preset = models::parse_model_family(text);
  return choice;
}

layers::AttentionSpec parse_attention_setting(const std::string& text) {
  return parsed_as("model.attention", text, [](const std::string& t) { return layers::AttentionSpec::parse(t); });
}

std::optional<layers::AttentionSpec> parse_cross_attention_setting(const std::string& text) {
  if (text.empty()) return std::nullopt;
  return parsed_as("model.cross_attention", text, [](const std::string& t) { return layers::AttentionSpec::parse(t); });
}

layers::PositionEncoding parse_positions_setting(const std::string& text) {
  return parsed_as("model.positions", text, layers::parse_position_encoding);
}

models::Pooling parse_pooling_setting(const std::string& text) {
  return parsed_as("model.pooling", text, models::parse_pooling);
}

const std::vector<SettingInfo>& run_settings() {
  static const std::vector<SettingInfo> infos = [] {
    std::vector<SettingInfo> out;
    for (const auto& s : settings()) out.push_back(s.info);
    return out;
  }();
  return infos;
}

void apply_setting(RunConfig& config, const std::string& section, const std::string& key,
                   const std::string& value) {
  const auto& setting = find_setting(section, key);
  try {
    setting.set(config, value);
  } catch (const Error& e) {
    const std::string what = e.what();
    const std::string name = section + "." + key;
    throw Error(what.rfind(name, 0) == 0 ? what : name + ": " + what);
  }
}

void apply_toml_file(RunConfig& config, const std::string& path) {
  toml::table table;
  const std::string content = read_file(path);
  reject_non_ascii_outside_strings(content, path);
  // toml++ 3.3 tests characters for Unicode whitespace wherever its parser is outside a string,
  // and that test is undefined behaviour for some non-ASCII characters. In malformed input the
  // parser is not always where the scan above thinks (fuzz findings: a quote inside a bare value
  // such as `5e<<z{'''`), so the text is first parsed with every non-ASCII byte replaced by 'x':
  // the same structure for every well-formed file, and no non-ASCII character for toml++ to test.
  // Only a file that passes is parsed with its own characters (an all-ASCII file is its own copy).
  std::string ascii = content;
  for (char& ch : ascii)
    if (static_cast<unsigned char>(ch) >= 0x80) ch = 'x';
  try {
    if (ascii != content) (void)toml::parse(ascii, path);
    table = toml::parse(content, path);
  } catch (const toml::parse_error& e) {
    // toml++'s description quotes the input, which may hold a line break (fuzz finding).
    throw Error(fmt::format("{}:{}: {}", path, e.source().begin.line, one_line(e.description())));
  }
  for (const auto& [section_key, section_node] : table) {
    const std::string section(section_key.str());
    const auto* section_table = section_node.as_table();
    if (!section_table)
      throw Error(fmt::format("{}:{}: '{}' must be a [section] (run, task, model, optimizer, "
                              "schedule)", path, section_node.source().begin.line, section));
    for (const auto& [key_name, node] : *section_table) {
      const std::string key(key_name.str());
      const auto line = node.source().begin.line;
      std::string text;
      if (auto s = node.value<std::string>(); s && node.is_string()) text = *s;
      else if (node.is_integer()) text = std::to_string(*node.value<int64_t>());
      else if (node.is_floating_point()) text = fmt::format("{}", *node.value<double>());
      else if (node.is_boolean()) text = *node.value<bool>() ? "true" : "false";
      else throw Error(fmt::format("{}:{}: {}.{} must be a string, number or boolean", path, line, section, key));
      try {
        apply_setting(config, section, key, text);
      } catch (const Error& e) {
        throw Error(fmt::format("{}:{}: {}", path, line, e.what()));
      }
    }
  }
}

std::string to_toml(const RunConfig& config) {
  std::ostringstream out;
  out << "# attnkit run configuration (resolved: every setting, defaults included)\n";
  std::string section;
  for (const auto& s : settings()) {
    if (s.info.section != section) {
      section = s.info.section;
      out << "\n[" << section << "]\n";
    }
    out << s.info.key << " = " << s.get(config) << "\n";
  }
  return out.str();
}

}  // namespace attnkit::train
