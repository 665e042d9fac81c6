// ListOps: the TSV reader (read_listops_tsv) and the expression evaluator on the raw bytes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "attnkit/data/listops.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attnkit;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const std::string path = fuzz::write_scratch_file("listops.tsv", bytes);
  fuzz::expect_clean([&] { (void)data::read_listops_tsv(path); }, path);
  fuzz::expect_clean([&] { (void)data::analyze_listops(bytes); });
  return 0;
}
