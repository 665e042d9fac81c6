// TSV data sets: classification, tagging and seq2seq readers, with and without a header line and
// with skip_bad_lines.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "attnkit/data/text_datasets.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attnkit;
  const std::string path =
      fuzz::write_scratch_file("data.tsv", std::string_view(reinterpret_cast<const char*>(data), size));
  for (const bool header : {false, true}) {
    for (const bool skip : {false, true}) {
      data::DataReadOptions options;
      options.header = header;
      options.skip_bad_lines = skip;
      fuzz::expect_clean([&] { (void)data::read_classification_tsv(path, {}, options); }, path);
      fuzz::expect_clean([&] { (void)data::read_classification_tsv(path, {"0", "1"}, options); }, path);
      fuzz::expect_clean([&] { (void)data::read_tagging_tsv(path, {}, options); }, path);
      fuzz::expect_clean([&] { (void)data::read_seq2seq_tsv(path, options); }, path);
    }
  }
  return 0;
}
