// The GPU tests' main. Every test runs; where no CUDA device is usable the device tests skip themselves,
// and the process exits 77, which ctest reports as a skipped entry rather than a pass, once the checks
// that need no device have passed.
#include <gtest/gtest.h>

#include <cstdio>

#include "tests/support/gpu_test_util.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int status = RUN_ALL_TESTS();
  if (status != 0 || fathom::test::gpu_present()) return status;
  const ::testing::UnitTest& tests = *::testing::UnitTest::GetInstance();
  std::printf("no usable CUDA device: %d GPU tests skipped, %d checks that need none passed\n",
              tests.skipped_test_count(), tests.successful_test_count());
  return 77;
}
