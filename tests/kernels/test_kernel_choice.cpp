// A kernel choice (kernels/runtime/kernel_choice.h): the environment variable is read at the first use,
// unset gives the default, a bad value is an error naming the variable, and set() wins over the
// environment whenever it is called.
#include <gtest/gtest.h>

#include <cstdlib>

#include "kernels/attention/decode_prologue.h"
#include "kernels/runtime/kernel_choice.h"
#include "tests/support/test_support.h"

using namespace fathom;
using fathom::testing::expect_error;

TEST(KernelChoice, ReadsItsVariableAtTheFirstUseAndSetWins) {
  ::unsetenv("FATHOM_TEST_CHOICE_UNSET");
  KernelChoice<DecodePrologue> unset("FATHOM_TEST_CHOICE_UNSET", DecodePrologue::separate, parse_fusion);
  EXPECT_EQ(unset.get(), DecodePrologue::separate);

  ::setenv("FATHOM_TEST_CHOICE_SET", "fused", 1);
  KernelChoice<DecodePrologue> from_environment("FATHOM_TEST_CHOICE_SET", DecodePrologue::separate, parse_fusion);
  EXPECT_EQ(from_environment.get(), DecodePrologue::fused);
  ::setenv("FATHOM_TEST_CHOICE_SET", "separate", 1);  // read once: a later change is not seen
  EXPECT_EQ(from_environment.get(), DecodePrologue::fused);
  from_environment.set(DecodePrologue::separate);
  EXPECT_EQ(from_environment.get(), DecodePrologue::separate);

  // set() before any get(): the environment, read first, does not overwrite it.
  ::setenv("FATHOM_TEST_CHOICE_FIRST", "fused", 1);
  KernelChoice<DecodePrologue> set_first("FATHOM_TEST_CHOICE_FIRST", DecodePrologue::separate, parse_fusion);
  set_first.set(DecodePrologue::separate);
  EXPECT_EQ(set_first.get(), DecodePrologue::separate);

  ::setenv("FATHOM_TEST_CHOICE_BAD", "yes", 1);
  KernelChoice<DecodePrologue> bad("FATHOM_TEST_CHOICE_BAD", DecodePrologue::separate, parse_fusion);
  expect_error([&] { bad.get(); }, {"FATHOM_TEST_CHOICE_BAD must be fused or separate", "'yes'"});
}

TEST(KernelChoice, AToggleReadsOnOrOff) {
  EXPECT_EQ(parse_toggle("on", "FATHOM_X"), Toggle::on);
  EXPECT_EQ(parse_toggle("off", "FATHOM_X"), Toggle::off);
  expect_error([] { parse_toggle("1", "FATHOM_DEPENDENT_LAUNCH"); },
               {"FATHOM_DEPENDENT_LAUNCH must be on or off", "'1'"});
}

TEST(KernelChoice, AUsageReadsAutoAlwaysOrNever) {
  EXPECT_EQ(parse_usage("auto", "X"), Usage::automatic);
  EXPECT_EQ(parse_usage("always", "X"), Usage::always);
  EXPECT_EQ(parse_usage("never", "X"), Usage::never);
  expect_error([] { parse_usage("on", "FATHOM_SKINNY_MATMUL"); },
               {"FATHOM_SKINNY_MATMUL must be auto, always or never", "'on'"});
  expect_error([] { parse_usage("", "FATHOM_MERGE_IN_SPLIT"); }, {"got ''"});
}

TEST(KernelChoice, ACountReadsAWholeNumberOfAtLeastOne) {
  EXPECT_EQ(parse_count("1", "X"), 1);
  EXPECT_EQ(parse_count("12", "X"), 12);
  expect_error([] { parse_count("0", "FATHOM_PERSISTENT_ONE_SPLIT_TILES"); },
               {"FATHOM_PERSISTENT_ONE_SPLIT_TILES must be a whole number, at least 1", "'0'"});
  expect_error([] { parse_count("4 tiles", "X"); }, {"'4 tiles'"});
  expect_error([] { parse_count("-2", "X"); }, {"'-2'"});
  expect_error([] { parse_count("", "X"); }, {"got ''"});
}
