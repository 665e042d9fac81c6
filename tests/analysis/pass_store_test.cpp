// The store of metric passes that lets an interrupted `attnkit analyze heads` resume
// (analysis::PassStore): passes round-trip through the file exactly (non-finite numbers too), a
// stored pass is not computed again, a torn last line (a killed process) is dropped and the file
// stays appendable, and a file of other settings or with a bad line before the last is a one-line
// error.
#include "attnkit/analysis/heads.h"
#include "attnkit/error.h"

#include <gtest/gtest.h>

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

namespace attnkit {
namespace {

namespace fs = std::filesystem;
using analysis::PassStore;

struct StoreFile {
  fs::path dir = fs::temp_directory_path() / fmt::format("attnkit-pass-store-{}", ::getpid());
  std::string path = (dir / "sub" / "passes.jsonl").string();  // the store makes its folder
  ~StoreFile() { fs::remove_all(dir); }
  std::vector<std::string> lines() const {
    std::ifstream in(path);
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }
};

// A store whose task counts its metric calls; the items depend on the call number.
struct Counting {
  int calls = 0;
  void attach(PassStore& store) {
    store.metric = [this] { return 0.25 + ++calls; };
    store.metric_loss = [this] { return 1.0 / 3.0 + calls; };
    store.metric_items = [this] {
      metrics::ItemStatistics items;
      items.metric = metrics::SummedMetric::kAccuracy;
      items.width = 2;
      items.values = {double(calls), 2.0, 0.1 * calls, 1.0};
      return items;
    };
  }
};

TEST(PassStore, PassesRoundTripAndAreNotComputedTwice) {
  StoreFile f;
  Counting c;
  {
    PassStore store(f.path, "settings A");
    c.attach(store);
    EXPECT_EQ(store.evaluate("1,1|1,0"), 1.25);
    EXPECT_EQ(store.evaluate("1,0|1,1"), 2.25);
    EXPECT_EQ(store.evaluate("1,1|1,0"), 1.25);  // found: not computed again
    EXPECT_EQ(c.calls, 2);
    EXPECT_EQ(*store.latest.loss, 1.0 / 3.0 + 1);
    EXPECT_EQ(store.latest.items.values, (std::vector<double>{1, 2, 0.1, 1}));
    EXPECT_EQ(store.loaded(), 0);
    EXPECT_EQ(store.recalled(), 1);
  }
  ASSERT_EQ(f.lines().size(), 3u);  // settings + two passes
  PassStore again(f.path, "settings A");
  Counting fresh;
  fresh.attach(again);
  EXPECT_EQ(again.loaded(), 2);
  EXPECT_EQ(again.evaluate("1,0|1,1"), 2.25);
  EXPECT_EQ(fresh.calls, 0);
  EXPECT_EQ(*again.latest.loss, 1.0 / 3.0 + 2);  // doubles exactly as written
  EXPECT_EQ(again.latest.items.values, (std::vector<double>{2, 2, 0.2, 1}));
  EXPECT_EQ(again.latest.items.width, 2u);
}

// JSON has no NaN or infinity: a diverged pass (NaN metric, infinite loss, NaN items) is stored
// and read back as such, not as null (which would make the line unreadable on resume).
TEST(PassStore, NonFiniteNumbersRoundTrip) {
  StoreFile f;
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  {
    PassStore store(f.path, "settings A");
    store.metric = [&] { return nan; };
    store.metric_loss = [&] { return inf; };
    store.metric_items = [&] {
      metrics::ItemStatistics items;
      items.metric = metrics::SummedMetric::kAccuracy;
      items.width = 2;
      items.values = {nan, -inf, 1.5, 2.0};
      return items;
    };
    EXPECT_TRUE(std::isnan(store.evaluate("1,1")));
  }
  PassStore again(f.path, "settings A");
  again.metric = [] { return 0.0; };  // not called: the pass is stored
  EXPECT_EQ(again.loaded(), 1);
  EXPECT_TRUE(std::isnan(again.evaluate("1,1")));
  EXPECT_EQ(*again.latest.loss, inf);
  ASSERT_EQ(again.latest.items.values.size(), 4u);
  EXPECT_TRUE(std::isnan(again.latest.items.values[0]));
  EXPECT_EQ(again.latest.items.values[1], -inf);
  EXPECT_EQ(again.latest.items.values[2], 1.5);
}

TEST(PassStore, TornLastLineIsDroppedAndTheFileStaysAppendable) {
  StoreFile f;
  Counting c;
  {
    PassStore store(f.path, "s");
    c.attach(store);
    store.evaluate("1");
  }
  { std::ofstream(f.path, std::ios::app) << R"({"mask": "0", "metric": 0.)"; }  // killed mid-write
  {
    PassStore store(f.path, "s");
    c.attach(store);
    EXPECT_EQ(store.loaded(), 1);
    EXPECT_EQ(f.lines().size(), 2u);
    store.evaluate("0");  // computed: the torn pass was not kept
    EXPECT_EQ(c.calls, 2);
  }
  PassStore last(f.path, "s");
  EXPECT_EQ(last.loaded(), 2);
}

TEST(PassStore, OtherSettingsOrABadLineAreOneLineErrors) {
  StoreFile f;
  {
    PassStore store(f.path, "model m; data d; max-length 96");
    Counting c;
    c.attach(store);
    store.evaluate("1");
    store.evaluate("0");
  }
  try {
    PassStore other(f.path, "model m; data d; max-length 64");
    FAIL() << "other settings were accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("other settings (max-length 96; now max-length 64)"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos);
  }
  auto lines = f.lines();
  lines[1] = "not json";
  {
    std::ofstream out(f.path);
    for (const auto& l : lines) out << l << '\n';
  }
  EXPECT_THROW(PassStore(f.path, "model m; data d; max-length 96"), Error);
  { std::ofstream(f.path) << "{}\n"; }
  EXPECT_THROW(PassStore(f.path, "x"), Error);
}

}  // namespace
}  // namespace attnkit
