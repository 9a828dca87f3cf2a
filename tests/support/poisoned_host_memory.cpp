// Every test runs with poisoned host allocations (core/allocator.h): a kernel or op that reads memory
// it never wrote sees NaN or -1, not the zeros a fresh heap page happens to hold, and fails its test.
#include <gtest/gtest.h>

#include "core/allocator.h"

namespace {

class PoisonedHostMemory : public ::testing::Environment {
 public:
  void SetUp() override { fathom::set_poison_host_allocations(true); }
  void TearDown() override { fathom::set_poison_host_allocations(false); }
};

// Registered before gtest_main runs the tests.
const auto* const kPoisonedHostMemory = ::testing::AddGlobalTestEnvironment(new PoisonedHostMemory);

}  // namespace
