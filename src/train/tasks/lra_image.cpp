// lra-pathfinder and lra-image: the Long-Range Arena's image tasks, whole-sequence classification
// of pixel tokens. An image of s×s pixels is a sequence of s² tokens, its intensities 0..255 read
// row by row (LRA's 256-token vocabulary, no padding inside a batch: every image of a task has
// the same size). Pathfinder from `attnkit data lra-pathfinder` files (task.data) or generated;
// Image from Fashion-MNIST's IDX files (task.data: the directory), a stand-in for LRA's CIFAR-10.
#include "task_common.h"

#include "attnkit/error.h"
#include "attnkit/data/idx.h"
#include "attnkit/data/pathfinder.h"

#include <fmt/format.h>

#include <filesystem>
#include <regex>

namespace attnkit::train::detail {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kIntensities = 256;  // token ids = pixel values

// Images of one size as uint8 rows of `length` pixels (converted to token ids per batch, so a
// 200,000-image Pathfinder set costs 200 MB, not 1.6 GB of int64 ids).
struct PixelSet {
  int64_t length = 0;
  std::vector<uint8_t> pixels;  // count × length
  std::vector<int64_t> labels;
  size_t count() const { return labels.size(); }
};

class PixelClassificationTask : public ModelTask {
 public:
  PixelClassificationTask(models::TaskModel model, const RunConfig& config, PixelSet train, PixelSet val)
      : ModelTask(std::move(model), config), train_(std::move(train)), val_(std::move(val)),
        order_(train_.count(), config.task.batch_size, config.trainer.seed) {}

  MicroBatchLoss train_loss(int64_t index, int rank, int world) override {
    const auto rows = order_.batch(index, rank, world);
    std::vector<int64_t> labels;
    for (size_t i : rows) labels.push_back(train_.labels[i]);
    const auto logits = run(train_, rows);
    return {models::cross_entropy(logits, torch::tensor(labels, at::kLong)),
            static_cast<int64_t>(rows.size()) * train_.length};
  }

  std::map<std::string, double> evaluate() override {
    models::PredictionMetrics metrics;
    for (size_t first = 0; first < val_.count(); first += static_cast<size_t>(batch_size_)) {
      std::vector<size_t> rows;
      std::vector<int64_t> labels;
      for (size_t i = first; i < std::min(val_.count(), first + static_cast<size_t>(batch_size_)); ++i) {
        rows.push_back(i);
        labels.push_back(val_.labels[i]);
      }
      metrics.add(run(val_, rows), torch::tensor(labels, at::kLong));
    }
    return {{"accuracy", metrics.accuracy()}, {"loss", metrics.mean_loss()}};
  }
  std::string primary_metric() const override { return "accuracy"; }
  bool higher_is_better() const override { return true; }

 private:
  at::Tensor run(const PixelSet& set, const std::vector<size_t>& rows) {
    const int64_t batch = static_cast<int64_t>(rows.size());
    auto ids = torch::empty({batch, set.length}, at::kLong);
    int64_t* out = ids.data_ptr<int64_t>();
    for (int64_t b = 0; b < batch; ++b) {
      const uint8_t* in = set.pixels.data() + rows[static_cast<size_t>(b)] * static_cast<size_t>(set.length);
      for (int64_t j = 0; j < set.length; ++j) out[b * set.length + j] = in[j];
    }
    models::TaskInputs in;
    in.input_ids = ids;
    in.attention_mask = torch::ones({batch, set.length}, at::kLong);
    return model_->forward(in).sequence_logits;
  }
  PixelSet train_;
  PixelSet val_;
  BatchOrder order_;
};

std::unique_ptr<TrainingTask> make_pixel_task(const RunConfig& config, PixelSet train, PixelSet val, int64_t classes) {
  if (train.count() == 0) throw Error(fmt::format("task '{}': no training images", config.task.name));
  if (val.count() == 0) throw Error(fmt::format("task '{}': no evaluation images", config.task.name));
  if (config.task.eval_examples > 0 && static_cast<int64_t>(val.count()) > config.task.eval_examples) {
    val.labels.resize(static_cast<size_t>(config.task.eval_examples));
    val.pixels.resize(val.labels.size() * static_cast<size_t>(val.length));
  }
  auto model = build_model(config, kIntensities, train.length, false, classification_heads(config, classes));
  return std::make_unique<PixelClassificationTask>(model, config, std::move(train), std::move(val));
}

PixelSet from_pathfinder(data::PathfinderSet set) {
  PixelSet out;
  out.length = static_cast<int64_t>(set.size) * set.size;
  out.pixels = std::move(set.pixels);
  out.labels.assign(set.labels.begin(), set.labels.end());
  return out;
}

PixelSet generated_pathfinder(const data::PathfinderOptions& options, uint64_t seed, int64_t count) {
  data::PathfinderSet set;
  set.size = options.size;
  data::PathfinderGenerator generator(options, seed);
  for (int64_t i = 0; i < count; ++i) {
    auto image = generator.next();
    set.labels.push_back(static_cast<uint8_t>(image.label));
    set.pixels.insert(set.pixels.end(), image.pixels.begin(), image.pixels.end());
  }
  return from_pathfinder(std::move(set));
}

// The training file task.data names: itself, or the one pathfinder{size}_train.bin of a directory.
std::string pathfinder_training_file(const std::string& data) {
  if (!fs::is_directory(data)) {
    if (!fs::exists(data))
      throw Error(fmt::format("{}: no such file or directory (write Pathfinder files with `attnkit data "
                              "lra-pathfinder --out DIR`)",
                              data));
    return data;
  }
  static const std::regex name("pathfinder[0-9]+_train\\.bin");
  std::vector<std::string> found;
  for (const auto& entry : fs::directory_iterator(data))
    if (std::regex_match(entry.path().filename().string(), name)) found.push_back(entry.path().string());
  if (found.size() != 1)
    throw Error(fmt::format("{}: {} (name the training file in task.data, or write one with `attnkit data "
                            "lra-pathfinder --out {}`)",
                            data, found.empty() ? "no pathfinder*_train.bin" : "several pathfinder*_train.bin", data));
  return found.front();
}

}  // namespace

std::unique_ptr<TrainingTask> make_lra_pathfinder(const RunConfig& config) {
  const auto& t = config.task;
  PixelSet train, val;
  if (!t.data.empty()) {
    const std::string train_file = pathfinder_training_file(t.data);
    data::PathfinderSet train_set = data::read_pathfinder_file(train_file);
    data::PathfinderSet val_set = data::read_pathfinder_file(evaluation_path(train_file, t.eval_split));
    if (val_set.size != train_set.size)
      throw Error(fmt::format("{}: {}x{} images, the training file's are {}x{}", evaluation_path(train_file, t.eval_split),
                              val_set.size, val_set.size, train_set.size, train_set.size));
    train = from_pathfinder(std::move(train_set));
    val = from_pathfinder(std::move(val_set));
  } else {
    if (t.image_size != 0 && t.image_size != 32 && t.image_size != 128)
      throw Error(fmt::format("task.image_size: lra-pathfinder generates 32 (0) or 128, got {}", t.image_size));
    const auto options = data::pathfinder_options(t.image_size == 0 ? 32 : static_cast<int>(t.image_size));
    train = generated_pathfinder(options, config.trainer.seed * 4 + 1, t.train_examples);
    val = generated_pathfinder(options, config.trainer.seed * 4 + 2, t.eval_examples);
  }
  return make_pixel_task(config, std::move(train), std::move(val), 2);
}

std::unique_ptr<TrainingTask> make_lra_image(const RunConfig& config) {
  const auto& t = config.task;
  if (t.data.empty())
    throw Error(fmt::format("task 'lra-image' needs task.data (the Fashion-MNIST directory, e.g. {})",
                            data::kFashionMnistDirectory));
  if (t.image_size != 0 && t.image_size != 28 && t.image_size != 32)
    throw Error(fmt::format("task.image_size: lra-image takes 28 (0) or 32 (padded), got {}", t.image_size));
  // Validation: the last twelfth of the training images (5,000 of Fashion-MNIST's 60,000), never
  // trained on; test: the test files.
  const data::LabelledImages train_all = data::read_fashion_mnist(t.data, "train");
  const size_t held_out = train_all.count() / 12;
  if (held_out == 0)
    throw Error(fmt::format("{}: {} training images, too few to hold out a validation twelfth", t.data, train_all.count()));
  const int64_t side = t.image_size == 0 ? train_all.rows : t.image_size;
  if (train_all.rows > side || train_all.columns > side)
    throw Error(fmt::format("task.image_size {} is smaller than the images ({}x{})", side, train_all.rows,
                            train_all.columns));
  // Images centred on a side×side black canvas (LRA's CIFAR-10 is 32×32 = 1024 tokens).
  auto convert = [&](const data::LabelledImages& images, size_t first, size_t end) {
    PixelSet set;
    set.length = side * side;
    set.pixels.assign((end - first) * static_cast<size_t>(set.length), 0);
    const int64_t top = (side - images.rows) / 2, left = (side - images.columns) / 2;
    const size_t area = static_cast<size_t>(images.rows) * images.columns;
    for (size_t i = first; i < end; ++i) {
      uint8_t* out = set.pixels.data() + (i - first) * static_cast<size_t>(set.length);
      const uint8_t* in = images.pixels.data() + i * area;
      for (int64_t y = 0; y < images.rows; ++y)
        std::copy(in + y * images.columns, in + (y + 1) * images.columns, out + (y + top) * side + left);
      set.labels.push_back(images.labels[i]);
    }
    return set;
  };
  const size_t split = train_all.count() - held_out;
  PixelSet train = convert(train_all, 0, split);
  PixelSet val;
  if (t.eval_split == "test") {
    const data::LabelledImages test = data::read_fashion_mnist(t.data, "test");
    if (test.rows != train_all.rows || test.columns != train_all.columns)
      throw Error(fmt::format("{}: test images are {}x{}, training images {}x{}", t.data, test.rows, test.columns,
                              train_all.rows, train_all.columns));
    val = convert(test, 0, test.count());
  } else {
    val = convert(train_all, split, train_all.count());
  }
  return make_pixel_task(config, std::move(train), std::move(val), data::kFashionMnistClasses);
}

}  // namespace attnkit::train::detail
