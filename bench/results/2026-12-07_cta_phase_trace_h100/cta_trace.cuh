// Diagnostic only (never part of fathom): each traced CTA's thread 0 writes one record of when it reached its phases.
// g0 / gend: %globaltimer (ns) at entry and at its last phase; c[i]: SM cycles since entry at phase i.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

namespace cta_trace {
struct Record {
  unsigned kind, grid, block, sm;
  unsigned long long g0, gend;
  unsigned c[8];
};
static_assert(sizeof(Record) == 64);
constexpr unsigned kCap = 1u << 19;
__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned sm_id() {
  unsigned s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}
struct Clock {
  unsigned long long g0;
  long long c0;
  unsigned c[8] = {};
  __device__ __forceinline__ void start() {
    g0 = global_ns();
    c0 = clock64();
  }
  __device__ __forceinline__ void mark(int i) { c[i] = unsigned(clock64() - c0); }
};
__device__ __forceinline__ void put(Record* records, unsigned* count, const Clock& clock, unsigned kind, unsigned grid,
                                    unsigned block) {
  Record r;
  r.kind = kind, r.grid = grid, r.block = block, r.sm = sm_id();
  r.g0 = clock.g0;
  r.gend = global_ns();
  for (int i = 0; i < 8; ++i) r.c[i] = clock.c[i];
  const unsigned at = atomicAdd(count, 1u);
  records[at % kCap] = r;
}
inline void dump(const void* records_symbol, const void* count_symbol, const char* path) {
  unsigned n = 0;
  cudaDeviceSynchronize();
  cudaMemcpyFromSymbol(&n, count_symbol, sizeof n);
  std::vector<Record> all(kCap);
  cudaMemcpyFromSymbol(all.data(), records_symbol, sizeof(Record) * kCap);
  FILE* f = std::fopen(path, "wb");
  if (!f) return;
  const unsigned kept = n < kCap ? n : kCap, first = n < kCap ? 0 : n % kCap;
  for (unsigned i = 0; i < kept; ++i) std::fwrite(&all[(first + i) % kCap], sizeof(Record), 1, f);
  std::fclose(f);
  std::fprintf(stderr, "cta_trace: %u records (%u kept) -> %s\n", n, kept, path);
}
}  // namespace cta_trace
#define CTA_TRACE_BUFFER(name)                                          \
  static __device__ cta_trace::Record name##_records[cta_trace::kCap];  \
  static __device__ unsigned name##_count;                              \
  extern "C" void cta_trace_dump_##name(const char* path) {            \
    cta_trace::dump(name##_records, &name##_count, path);               \
  }
