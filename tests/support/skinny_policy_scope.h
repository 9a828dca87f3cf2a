#pragma once

#include "kernels/matmul/skinny_matmul.h"

namespace fathom::test {

// Sets the skinny GEMM policy for one test and puts the previous one back.
class SkinnyPolicyScope {
 public:
  explicit SkinnyPolicyScope(SkinnyMatmulPolicy policy) : saved_(skinny_matmul_policy()) {
    set_skinny_matmul_policy(policy);
  }
  ~SkinnyPolicyScope() { set_skinny_matmul_policy(saved_); }
  SkinnyPolicyScope(const SkinnyPolicyScope&) = delete;
  SkinnyPolicyScope& operator=(const SkinnyPolicyScope&) = delete;

 private:
  SkinnyMatmulPolicy saved_;
};

}  // namespace fathom::test
