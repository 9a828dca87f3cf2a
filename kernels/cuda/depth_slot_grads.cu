// Depth slot gradients from their readers' weights (kernels/moda_attention.h, DepthWeights): one
// warp per (batch, token, KV head) row walks the readers in order and, within each, the KV head's G
// query heads in order, adding ds q and p dO into each slot's sums in registers (a fixed order: the
// result does not depend on the launch). The reader's q and dO rows are read once for all slots of
// the run, which is what makes a layer's slots cheaper formed together.
#include <algorithm>

#include "kernels/cuda/argument_checks.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/moda_tensor.h"
#include "kernels/cuda/runtime.h"

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

template <int E>
struct alignas(2 * E) Bf16Lanes {
  __nv_bfloat16 v[E];
};

template <int D, typename Out>
__global__ void __launch_bounds__(256) depth_slot_grads_kernel(const SlotGradArgs a) {
  constexpr int E = D / 32;  // elements per lane
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (row >= a.rows) return;
  const int lane = int(threadIdx.x & 31);
  const int64_t bt = row / a.Hk;
  const int hk = int(row - bt * a.Hk);
  float gk[kMaxRunSlots][E], gv[kMaxRunSlots][E];
#pragma unroll
  for (int i = 0; i < kMaxRunSlots; ++i)
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const bool held = a.add && i < a.slots;
      gk[i][e] = held ? to_float(static_cast<const Out*>(a.dk[i])[row * D + lane * E + e]) : 0.f;
      gv[i][e] = held ? to_float(static_cast<const Out*>(a.dv[i])[row * D + lane * E + e]) : 0.f;
    }
  for (int r = 0; r < a.n_readers; ++r) {
    const ReaderArgs& rd = a.readers[r];
    const int lo = max(a.first, rd.begin) - a.first, hi = min(a.first + a.slots, rd.end) - a.first;
    if (lo >= hi) continue;
    const int L = rd.end - rd.begin;
    for (int g = 0; g < a.G; ++g) {
      const int64_t qrow = bt * a.Hq + int64_t(hk) * a.G + g;
      const auto q = *reinterpret_cast<const Bf16Lanes<E>*>(rd.q + qrow * D + lane * E);
      const auto dout = *reinterpret_cast<const Bf16Lanes<E>*>(rd.dout + qrow * D + lane * E);
      const float* wk = rd.ds + qrow * L + (a.first - rd.begin);
      const float* wv = rd.p + qrow * L + (a.first - rd.begin);
#pragma unroll
      for (int i = 0; i < kMaxRunSlots; ++i) {
        if (i < lo || i >= hi) continue;
        const float ck = wk[i], cv = wv[i];
#pragma unroll
        for (int e = 0; e < E; ++e) {
          gk[i][e] += ck * __bfloat162float(q.v[e]);
          gv[i][e] += cv * __bfloat162float(dout.v[e]);
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kMaxRunSlots; ++i) {
    if (i >= a.slots) break;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      static_cast<Out*>(a.dk[i])[row * D + lane * E + e] = from_float<Out>(gk[i][e]);
      static_cast<Out*>(a.dv[i])[row * D + lane * E + e] = from_float<Out>(gv[i][e]);
    }
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
  FATHOM_CHECK(dtype == DType::f32 || dtype == DType::bf16, op, ": gradients are F32 or BF16, got ",
               dtype_name(dtype));
  const int64_t B = q0.dim(0), T = q0.dim(1), Hq = q0.dim(2), d = q0.dim(3);
  FATHOM_CHECK(d == 64 || d == 128, op, ": head dim ", d, " is not 64 or 128");
  // More readers than one launch carries: the launches add into F32 sums, converted at the end.
  const bool batches = int64_t(readers.size()) > kMaxReaders;
  const DType out_dtype = batches ? DType::f32 : dtype;
  std::vector<SlotGrads> out;
  for (int64_t s = first; s < last; ++s)
    out.push_back({Tensor::empty({B, T, kv_heads, d}, out_dtype, device),
                   Tensor::empty({B, T, kv_heads, d}, out_dtype, device)});
  SlotGradArgs a{};
  a.rows = B * T * kv_heads;
  a.Hq = int(Hq), a.Hk = int(kv_heads), a.G = int(Hq / kv_heads);
  if (a.rows == 0) return out;
  constexpr int kThreads = 256;
  const unsigned blocks = unsigned((a.rows * 32 + kThreads - 1) / kThreads);
  for (int64_t s0 = first; s0 < last; s0 += kMaxRunSlots) {
    a.first = int(s0), a.slots = int(std::min<int64_t>(kMaxRunSlots, last - s0));
    for (int i = 0; i < a.slots; ++i) {
      a.dk[i] = out[size_t(s0 - first + i)].k.raw();
      a.dv[i] = out[size_t(s0 - first + i)].v.raw();
    }
    a.add = false;
    for (size_t r0 = 0; r0 < readers.size(); r0 += kMaxReaders) {
      a.n_readers = 0;
      for (size_t r = r0; r < std::min(readers.size(), r0 + kMaxReaders); ++r) {
        const DepthReader& rd = *readers[r];
        a.readers[a.n_readers++] = {reinterpret_cast<const __nv_bfloat16*>(rd.q.data<bf16>()),
                                    reinterpret_cast<const __nv_bfloat16*>(rd.grad_o.data<bf16>()),
                                    rd.weights.p.data<float>(), rd.weights.ds.data<float>(), int(rd.begin),
                                    int(rd.end)};
      }
      auto launch = [&]<int D, typename Out>() {
        depth_slot_grads_kernel<D, Out><<<blocks, kThreads, 0, stream_for(device)>>>(a);
        CUDA_CHECK_LAUNCH();
      };
      if (d == 64)
        out_dtype == DType::f32 ? launch.template operator()<64, float>()
                                : launch.template operator()<64, __nv_bfloat16>();
      else
        out_dtype == DType::f32 ? launch.template operator()<128, float>()
                                : launch.template operator()<128, __nv_bfloat16>();
      a.add = true;
    }
  }
  if (batches)
    for (SlotGrads& g : out) g = {g.k.to(dtype), g.v.to(dtype)};
  return out;
}

}  // namespace fathom::cuda
