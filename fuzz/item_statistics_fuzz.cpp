// Per-item statistics files (`attnkit eval --items` / `--paired-bs`, metrics/stats.h): any JSON
// either loads or is refused in one line naming the file; what loads writes back to the same
// statistics, and a paired bootstrap of it against itself is level.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <string_view>

#include <nlohmann/json.hpp>

#include "attnkit/metrics/stats.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attnkit;
  const auto parsed = nlohmann::json::parse(std::string_view(reinterpret_cast<const char*>(data), size), nullptr, false);
  if (parsed.is_discarded()) return 0;  // not JSON: `eval` says so before this reader runs
  fuzz::expect_clean(
      [&] {
        const auto items = metrics::item_statistics_from_json(parsed, "items.json");
        const auto back = metrics::item_statistics_from_json(metrics::item_statistics_json(items), "round trip");
        if (back.values != items.values || back.width != items.width || back.metric != items.metric) {
          std::fprintf(stderr, "item statistics changed on a round trip\n");
          std::abort();
        }
        metrics::PairedBootstrapOptions options;
        options.samples = 8;
        if (items.items() <= 64) {
          const auto r = metrics::paired_bootstrap(items, items, options);
          // (a score may overflow, e.g. a perplexity of 1e300 nats over 1e-300 tokens: inf - inf)
          if (std::isfinite(r.a.score) &&
              (r.difference.score != 0 || metrics::verdict(r, "a", "b").verdict != metrics::Verdict::kLevel)) {
            std::fprintf(stderr, "statistics against themselves are not level\n");
            std::abort();
          }
        }
      },
      "items.json");
  return 0;
}
