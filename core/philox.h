// Philox4x32-10 (Salmon et al., SC'11): a counter-based generator. The same (key, counter) gives the
// same numbers on the host and on the GPU, so CPU and CUDA initialisation and dropout-style draws agree.
#pragma once
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define FATHOM_HD __host__ __device__ __forceinline__
#else
#define FATHOM_HD inline
#endif

namespace fathom::philox {

struct U32x4 {
  uint32_t v[4];
};

FATHOM_HD void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = uint64_t(a) * uint64_t(b);
  hi = uint32_t(p >> 32);
  lo = uint32_t(p);
}

// Ten rounds of Philox4x32 on counter c with key k.
FATHOM_HD U32x4 philox4x32(U32x4 c, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kM0, c.v[0], hi0, lo0);
    mulhilo(kM1, c.v[2], hi1, lo1);
    c = U32x4{{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
    k0 += kW0;
    k1 += kW1;
  }
  return c;
}

// Four 32-bit draws for element `index` of a stream; `attempt` separates redraws.
FATHOM_HD U32x4 draw(uint64_t seed, uint64_t index, uint32_t attempt) {
  return philox4x32(U32x4{{uint32_t(index), uint32_t(index >> 32), attempt, 0u}}, uint32_t(seed), uint32_t(seed >> 32));
}

// Uniform in (0, 1]: never 0, so log() is safe.
FATHOM_HD float to_unit(uint32_t x) { return (float(x >> 8) + 1.0f) * (1.0f / 16777216.0f); }

// Standard normal by Box-Muller from the first two draws.
FATHOM_HD float normal(uint64_t seed, uint64_t index, uint32_t attempt = 0) {
  const U32x4 r = draw(seed, index, attempt);
  const float u1 = to_unit(r.v[0]);
  const float u2 = to_unit(r.v[1]);
  return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795864f * u2);
}

// Standard normal truncated to [-cutoff, cutoff] by deterministic redraws.
FATHOM_HD float truncated_normal(uint64_t seed, uint64_t index, float cutoff) {
  for (uint32_t attempt = 0;; ++attempt) {
    const float x = normal(seed, index, attempt);
    if (fabsf(x) <= cutoff) return x;
  }
}

}  // namespace fathom::philox
