#include <gtest/gtest.h>

#include "orrery/base/units.hpp"

namespace orrery::base::units {
namespace {

TEST(Units, ParsesHumanUnitsIntoSi) {
  EXPECT_DOUBLE_EQ(parse("450 GB/s", Unit::kBytesPerSecond), 450e9);
  // Network rates are in bits: 400 Gb/s / 8 = 50 GB/s.
  EXPECT_DOUBLE_EQ(parse("400 Gb/s", Unit::kBytesPerSecond), 50e9);
  EXPECT_DOUBLE_EQ(parse("2.5us", Unit::kSeconds), 2.5e-6);
  EXPECT_DOUBLE_EQ(parse("80 GiB", Unit::kBytes), 80.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(parse("80 GB", Unit::kBytes), 80e9);
  EXPECT_DOUBLE_EQ(parse("989 TFLOPS", Unit::kFlopPerSecond), 989e12);
  EXPECT_DOUBLE_EQ(parse("1e-6", Unit::kSeconds), 1e-6);  // a bare number is SI
}

TEST(Units, RejectsUnknownUnitsAndNonNumbers) {
  try {
    parse("400 Gbit/s", Unit::kBytesPerSecond);
    FAIL() << "accepted an unknown unit";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("unknown unit 'Gbit/s' in '400 Gbit/s'"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(parse("fast", Unit::kBytesPerSecond), std::invalid_argument);
  EXPECT_THROW(parse("3 GB", Unit::kNone), std::invalid_argument);
  EXPECT_THROW(parse("inf", Unit::kSeconds), std::invalid_argument);
}

TEST(Units, FormatsWithThreeSignificantDigits) {
  EXPECT_EQ(format(450e9, Unit::kBytesPerSecond), "450 GB/s");
  EXPECT_EQ(format(1.25e-6, Unit::kSeconds), "1.25 us");
  EXPECT_EQ(format(80.0 * 1073741824.0, Unit::kBytes), "80 GiB");
  EXPECT_EQ(format(989e12, Unit::kFlopPerSecond), "989 TFLOP/s");
  EXPECT_EQ(format(0, Unit::kSeconds), "0 s");
  EXPECT_EQ(format(3.0 * 3600, Unit::kSeconds), "180 min");
}

TEST(Units, NumberIsShortestRoundTrip) {
  for (double v : {0.1, 4.5e11, 128.0, 1.0 / 3.0, 6.02e23, -2.5e-9}) {
    EXPECT_EQ(std::stod(number(v)), v);
  }
  EXPECT_EQ(number(128.0), "128");
  EXPECT_EQ(number(0.1), "0.1");
}

}  // namespace
}  // namespace orrery::base::units
