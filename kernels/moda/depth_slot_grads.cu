// Depth slot gradients from their readers' weights (kernels/moda/moda_attention.h, DepthWeights): each
// (batch, token, KV head) row walks the readers in order and, within each, the KV head's G query
// heads in order, adding ds q and p dO into each slot's sums in registers (a fixed order: the
// result does not depend on the launch). The reader's q and dO rows are read once for all slots of
// the run, which is what makes a layer's slots cheaper formed together.
#include <algorithm>
#include <vector>

#include "kernels/moda/moda_tensor.h"
#include "kernels/runtime/argument_checks.h"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

namespace {

// Readers per launch (their pointers ride in the kernel parameters, within 4 KB) and slots per launch
// (the sums each lane keeps).
constexpr int kMaxReaders = 64, kMaxRunSlots = 4;

struct ReaderArgs {
  const __nv_bfloat16* q;     // [B, T, Hq, d]
  const __nv_bfloat16* dout;  // [B, T, Hq, d]
  const float* p;             // [B, T, Hq, end - begin]
  const float* ds;
  int begin, end;
};

struct SlotGradArgs {
  ReaderArgs readers[kMaxReaders];
  int n_readers;
  void* dk[kMaxRunSlots];  // [B, T, Hk, d] each
  void* dv[kMaxRunSlots];
  int first, slots;  // this launch forms slots [first, first + slots)
  bool add;          // F32 outputs that earlier readers' launch already holds sums in
  int64_t rows;      // B * T * Hk
  int Hq, Hk, G;
};

// Eight bf16 elements: one 16-byte load.
struct alignas(16) Bf16x8 {
  __nv_bfloat16 v[8];
};

// Eight consecutive elements of an F32 or BF16 row, as 16-byte accesses.
__device__ __forceinline__ void load8(const float* p, float (&x)[8]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
  x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
}
__device__ __forceinline__ void load8(const __nv_bfloat16* p, float (&x)[8]) {
  const Bf16x8 v = *reinterpret_cast<const Bf16x8*>(p);
#pragma unroll
  for (int e = 0; e < 8; ++e) x[e] = __bfloat162float(v.v[e]);
}
__device__ __forceinline__ void store8(float* p, const float (&x)[8]) {
  reinterpret_cast<float4*>(p)[0] = make_float4(x[0], x[1], x[2], x[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(x[4], x[5], x[6], x[7]);
}
__device__ __forceinline__ void store8(__nv_bfloat16* p, const float (&x)[8]) {
  Bf16x8 v;
#pragma unroll
  for (int e = 0; e < 8; ++e) v.v[e] = __float2bfloat16_rn(x[e]);
  *reinterpret_cast<Bf16x8*>(p) = v;
}

// Threads of D / 8 lanes each own one (batch, token, KV head) row, 8 elements per lane, so every
// load of q and dO is 16 bytes; the weights of a row (the same for its lanes) are broadcast. The
// (reader, head) pairs run as one loop, unrolled so that several pairs' loads are in flight at once
// (the kernel is bound by how many bytes each SM has in flight); N slots of sums per lane.
template <int D, int N, typename Out>
__global__ void __launch_bounds__(256) depth_slot_grads_kernel(const SlotGradArgs a) {
  constexpr int kLanes = D / 8;
  const int64_t thread = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t row = thread / kLanes;
  if (row >= a.rows) return;
  const int col = int(thread % kLanes) * 8;
  const int64_t bt = row / a.Hk;
  const int hk = int(row - bt * a.Hk);
  float gk[N][8], gv[N][8];
#pragma unroll
  for (int i = 0; i < N; ++i) {
    if (a.add && i < a.slots) {
      load8(static_cast<const Out*>(a.dk[i]) + row * D + col, gk[i]);
      load8(static_cast<const Out*>(a.dv[i]) + row * D + col, gv[i]);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) gk[i][e] = gv[i][e] = 0.f;
    }
  }
  const int pairs = a.n_readers * a.G;
#pragma unroll 4
  for (int pair = 0; pair < pairs; ++pair) {
    const ReaderArgs& rd = a.readers[pair / a.G];
    const int g = pair - pair / a.G * a.G;
    const int lo = max(a.first, rd.begin) - a.first, hi = min(a.first + a.slots, rd.end) - a.first;
    const int L = rd.end - rd.begin;
    const int64_t qrow = bt * a.Hq + int64_t(hk) * a.G + g;
    float q[8], dout[8];
    load8(rd.q + qrow * D + col, q);
    load8(rd.dout + qrow * D + col, dout);
    const float* wk = rd.ds + qrow * L + (a.first - rd.begin);
    const float* wv = rd.p + qrow * L + (a.first - rd.begin);
#pragma unroll
    for (int i = 0; i < N; ++i) {
      if (i < lo || i >= hi) continue;
      const float ck = wk[i], cv = wv[i];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        gk[i][e] += ck * q[e];
        gv[i][e] += cv * dout[e];
      }
    }
  }
#pragma unroll
  for (int i = 0; i < N; ++i) {
    if (i >= a.slots) break;
    store8(static_cast<Out*>(a.dk[i]) + row * D + col, gk[i]);
    store8(static_cast<Out*>(a.dv[i]) + row * D + col, gv[i]);
  }
}

void check_reader(const char* op, const DepthReader& r, Device device) {
  const char* why = "depth weights come from the bf16 MoDA kernels with fp32 statistics";
  check_device_tensor(op, "q", r.q, DType::bf16, device, why);
  check_device_tensor(op, "dO", r.grad_o, DType::bf16, device, why);
  check_device_tensor(op, "weights p", r.weights.p, DType::f32, device, why);
  check_device_tensor(op, "weights ds", r.weights.ds, DType::f32, device, why);
}

}  // namespace

std::vector<SlotGrads> depth_slot_grads(const std::vector<const DepthReader*>& readers, int64_t first, int64_t last,
                                        int64_t kv_heads, DType dtype) {
  const char* op = "depth_slot_grads (cuda)";
  const Tensor& q0 = readers.front()->q;
  const Device device = q0.device();
  for (const DepthReader* r : readers) check_reader(op, *r, device);
  FATHOM_CHECK(dtype == DType::f32 || dtype == DType::bf16, op, ": gradients are F32 or BF16, got ", dtype_name(dtype));
  const int64_t B = q0.dim(0), T = q0.dim(1), Hq = q0.dim(2), d = q0.dim(3);
  FATHOM_CHECK(d == 64 || d == 128, op, ": head dim ", d, " is not 64 or 128");
  // More readers than one launch carries: the launches add into F32 sums, converted at the end.
  const bool batches = int64_t(readers.size()) > kMaxReaders;
  const DType out_dtype = batches ? DType::f32 : dtype;
  std::vector<SlotGrads> out;
  for (int64_t s = first; s < last; ++s)
    out.push_back(
        {Tensor::empty({B, T, kv_heads, d}, out_dtype, device), Tensor::empty({B, T, kv_heads, d}, out_dtype, device)});
  SlotGradArgs a{};
  a.rows = B * T * kv_heads;
  a.Hq = int(Hq), a.Hk = int(kv_heads), a.G = int(Hq / kv_heads);
  if (a.rows == 0) return out;
  constexpr int kThreads = 256;
  const unsigned blocks = unsigned((a.rows * (d / 8) + kThreads - 1) / kThreads);
  for (int64_t s0 = first; s0 < last; s0 += kMaxRunSlots) {
    a.first = int(s0), a.slots = int(std::min<int64_t>(kMaxRunSlots, last - s0));
    for (int i = 0; i < a.slots; ++i) {
      a.dk[i] = out[size_t(s0 - first + i)].k.raw();
      a.dv[i] = out[size_t(s0 - first + i)].v.raw();
    }
    // The readers of this launch's slots (every pair the kernel walks adds to one of them at least).
    std::vector<const DepthReader*> overlapping;
    for (const DepthReader* r : readers)
      if (r->begin < s0 + a.slots && r->end > s0) overlapping.push_back(r);
    a.add = false;
    for (size_t r0 = 0; r0 < overlapping.size(); r0 += kMaxReaders) {
      a.n_readers = 0;
      for (size_t r = r0; r < std::min(overlapping.size(), r0 + kMaxReaders); ++r) {
        const DepthReader& rd = *overlapping[r];
        a.readers[a.n_readers++] = {reinterpret_cast<const __nv_bfloat16*>(rd.q.data<bf16>()),
                                    reinterpret_cast<const __nv_bfloat16*>(rd.grad_o.data<bf16>()),
                                    rd.weights.p.data<float>(),
                                    rd.weights.ds.data<float>(),
                                    int(rd.begin),
                                    int(rd.end)};
      }
      auto launch = [&]<int D, int N>() {
        if (out_dtype == DType::f32)
          depth_slot_grads_kernel<D, N, float><<<blocks, kThreads, 0, stream_for(device)>>>(a);
        else
          depth_slot_grads_kernel<D, N, __nv_bfloat16><<<blocks, kThreads, 0, stream_for(device)>>>(a);
        CUDA_CHECK_LAUNCH();
      };
      // Two slots (a layer's attention and FFN writes) take half the sums of four.
      if (d == 64)
        a.slots <= 2 ? launch.template operator()<64, 2>() : launch.template operator()<64, kMaxRunSlots>();
      else
        a.slots <= 2 ? launch.template operator()<128, 2>() : launch.template operator()<128, kMaxRunSlots>();
      a.add = true;
    }
    // No reader of these slots (the caller's readers overlap the whole range, so only in a direct call).
    if (overlapping.empty())
      for (int i = 0; i < a.slots; ++i)
        for (void* p : {a.dk[i], a.dv[i]})
          CUDA_CHECK(cudaMemsetAsync(p, 0, size_t(a.rows * d) * dtype_size(out_dtype), stream_for(device)));
  }
  if (batches)
    for (SlotGrads& g : out) g = {g.k.to(dtype), g.v.to(dtype)};
  return out;
}

}  // namespace fathom::cuda
