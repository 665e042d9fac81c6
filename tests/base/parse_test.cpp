// attnkit/parse.h: the whole text is the number, or a one-line error that names and quotes it.
#include "attnkit/parse.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "support/test_files.h"

namespace attnkit {
namespace {

using testing::error_of;

TEST(ParseInt, AcceptsWholeIntegers) {
  EXPECT_EQ(parse_int("0", "n"), 0);
  EXPECT_EQ(parse_int("42", "n"), 42);
  EXPECT_EQ(parse_int("-7", "n"), -7);
  EXPECT_EQ(parse_int("007", "n"), 7);
  EXPECT_EQ(parse_int("9223372036854775807", "n"), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(parse_int("-9223372036854775808", "n"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(try_parse_int("123"), 123);
}

TEST(ParseInt, RejectsAnythingElse) {
  for (const char* bad : {"", " ", " 1", "1 ", "1\n", "+1", "12x", "x12", "1.5", "1e3", "0x10", "-", "--1", "1-",
                          "nan", "inf"}) {
    EXPECT_FALSE(try_parse_int(bad).has_value()) << "'" << bad << "'";
    EXPECT_EQ(error_of([&] { parse_int(bad, "n"); }), std::string("n: '") + (std::string(bad) == "1\n" ? "1\\n" : bad) +
                                                         "' is not an integer")
        << "'" << bad << "'";
  }
}

TEST(ParseInt, OverflowIsOutOfRange) {
  EXPECT_FALSE(try_parse_int("9223372036854775808").has_value());
  EXPECT_FALSE(try_parse_int("-9223372036854775809").has_value());
  EXPECT_EQ(error_of([] { parse_int("99999999999999999999", "run.steps"); }),
            "run.steps: '99999999999999999999' is out of range (a 64-bit integer: "
            "-9223372036854775808..9223372036854775807)");
}

TEST(ParseInt, ErrorNamesTheSettingAndStaysOneLine) {
  EXPECT_EQ(error_of([] { parse_int("12x", "model.hidden"); }), "model.hidden: '12x' is not an integer");
  EXPECT_EQ(error_of([] { parse_int("1\r\n2\t", "x"); }), "x: '1\\r\\n2\\t' is not an integer");
  const std::string long_text(100, 'a');
  EXPECT_EQ(error_of([&] { parse_int(long_text, "x"); }), "x: '" + std::string(60, 'a') + "...' is not an integer");
}

TEST(ParseUnsigned, DigitsOnly) {
  EXPECT_EQ(try_parse_unsigned("0"), 0u);
  EXPECT_EQ(try_parse_unsigned("18446744073709551615"), std::numeric_limits<uint64_t>::max());
  for (const char* bad : {"", "-1", "-0", "+1", " 1", "1 ", "18446744073709551616", "1a"})
    EXPECT_FALSE(try_parse_unsigned(bad).has_value()) << "'" << bad << "'";
}

TEST(ParseDouble, AcceptsDecimalAndScientific) {
  EXPECT_EQ(parse_double("0.5", "x"), 0.5);
  EXPECT_EQ(parse_double("-2", "x"), -2.0);
  EXPECT_EQ(parse_double("1e-3", "x"), 1e-3);
  EXPECT_EQ(parse_double("1E3", "x"), 1000.0);
  EXPECT_EQ(parse_double(".25", "x"), 0.25);
  EXPECT_EQ(parse_double("3.", "x"), 3.0);
  EXPECT_EQ(try_parse_double("6.5e1"), 65.0);
}

TEST(ParseDouble, RejectsJunkNonFiniteAndOverflow) {
  for (const char* bad : {"", " ", " 1", "1 ", "+1", "1.5x", "1e", "0x1p3", "1,5", ".", "e3"}) {
    EXPECT_FALSE(try_parse_double(bad).has_value()) << "'" << bad << "'";
    EXPECT_EQ(error_of([&] { parse_double(bad, "optimizer.lr"); }),
              std::string("optimizer.lr: '") + bad + "' is not a number");
  }
  for (const char* non_finite : {"nan", "inf", "-inf", "infinity", "NaN"}) {
    EXPECT_FALSE(try_parse_double(non_finite).has_value()) << non_finite;
    EXPECT_EQ(error_of([&] { parse_double(non_finite, "run.clip_norm"); }),
              std::string("run.clip_norm: '") + non_finite + "' is not a finite number");
  }
  EXPECT_FALSE(try_parse_double("1e999").has_value());
  EXPECT_EQ(error_of([] { parse_double("1e999", "x"); }), "x: '1e999' is out of range for a double");
}

}  // namespace
}  // namespace attnkit
