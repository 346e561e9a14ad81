#include <gtest/gtest.h>

#include "orrery/traces/units.hpp"

namespace orrery::units {
namespace {

TEST(Units, ParsesHumanUnitsIntoSi) {
  EXPECT_DOUBLE_EQ(parse("450 GB/s", pb::UNIT_BYTES_PER_SECOND), 450e9);
  // Network rates are in bits: 400 Gb/s / 8 = 50 GB/s.
  EXPECT_DOUBLE_EQ(parse("400 Gb/s", pb::UNIT_BYTES_PER_SECOND), 50e9);
  EXPECT_DOUBLE_EQ(parse("2.5us", pb::UNIT_SECONDS), 2.5e-6);
  EXPECT_DOUBLE_EQ(parse("80 GiB", pb::UNIT_BYTES), 80.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(parse("80 GB", pb::UNIT_BYTES), 80e9);
  EXPECT_DOUBLE_EQ(parse("989 TFLOPS", pb::UNIT_FLOP_PER_SECOND), 989e12);
  EXPECT_DOUBLE_EQ(parse("1e-6", pb::UNIT_SECONDS), 1e-6);  // a bare number is SI
}

TEST(Units, RejectsUnknownUnitsAndNonNumbers) {
  try {
    parse("400 Gbit/s", pb::UNIT_BYTES_PER_SECOND);
    FAIL() << "accepted an unknown unit";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("unknown unit 'Gbit/s' in '400 Gbit/s'"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(parse("fast", pb::UNIT_BYTES_PER_SECOND), std::invalid_argument);
  EXPECT_THROW(parse("3 GB", pb::UNIT_UNSPECIFIED), std::invalid_argument);
  EXPECT_THROW(parse("inf", pb::UNIT_SECONDS), std::invalid_argument);
}

TEST(Units, FormatsWithThreeSignificantDigits) {
  EXPECT_EQ(format(450e9, pb::UNIT_BYTES_PER_SECOND), "450 GB/s");
  EXPECT_EQ(format(1.25e-6, pb::UNIT_SECONDS), "1.25 us");
  EXPECT_EQ(format(80.0 * 1073741824.0, pb::UNIT_BYTES), "80 GiB");
  EXPECT_EQ(format(989e12, pb::UNIT_FLOP_PER_SECOND), "989 TFLOP/s");
  EXPECT_EQ(format(0, pb::UNIT_SECONDS), "0 s");
  EXPECT_EQ(format(3.0 * 3600, pb::UNIT_SECONDS), "180 min");
}

TEST(Units, NumberIsShortestRoundTrip) {
  for (double v : {0.1, 4.5e11, 128.0, 1.0 / 3.0, 6.02e23, -2.5e-9}) {
    EXPECT_EQ(std::stod(number(v)), v);
  }
  EXPECT_EQ(number(128.0), "128");
  EXPECT_EQ(number(0.1), "0.1");
}

}  // namespace
}  // namespace orrery::units
