// CUDA embedding. Forward: a gather of table rows in 16-byte packs. Backward, deterministic and free
// of float atomics:
//   1. a stable LSD radix sort of (id, position) by id, 8 bits a pass, in which one warp ranks a
//      chunk's elements 32 at a time with __match_any_sync (integer counters only), so positions stay
//      ascending within each id;
//   2. a segmented sum over the sorted order in fixed chunks of P entries: a run of one id that lies
//      wholly inside a chunk is summed and added to its table row by that chunk alone; a run cut by a
//      chunk boundary leaves a partial sum, and the chunk where the id's segment starts adds those
//      partials in chunk order. Every row's sum thus has one fixed order for a given shape.
#include <bit>

#include "kernels/dispatch.h"
#include "kernels/embedding/embedding.h"
#include "kernels/runtime/device_errors.cuh"
#include "kernels/runtime/device_math.cuh"
#include "kernels/runtime/float_dispatch.h"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

namespace {

// ---- forward ----

template <int N, typename T, typename I>
__global__ void embedding_forward_kernel(const I* ids, const T* table, T* out, int64_t n, int64_t vocab, int64_t dim,
                                         DeviceErrorRecord* errors) {
  const int64_t packs_per_row = dim / N, total = n * packs_per_row;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += stride) {
    const int64_t token = idx / packs_per_row, c = (idx % packs_per_row) * N;
    const int64_t id = int64_t(ids[token]);
    Pack<T, N> v;
    if (id >= 0 && id < vocab) {
      v = load_pack<N>(table + id * dim + c);
    } else {  // never read out of bounds; the host raises the error at its next synchronisation
      if (c == 0) report_device_error(errors, kEmbeddingIdOutOfRange, id, token, vocab);
#pragma unroll
      for (int k = 0; k < N; ++k) v.v[k] = from_float<T>(0.0f);
    }
    store_pack<N>(out + token * dim + c, v);
  }
}

// ---- backward, step 1: stable radix sort of (id, position) ----

constexpr int kDigitBits = 8;
constexpr int kBuckets = 1 << kDigitBits;
constexpr int kSortChunk = 1024;  // elements per warp

// keys = ids, with bad ids (reported) mapped to `vocab`, a bucket the sum skips; values = positions.
template <typename I>
__global__ void embedding_keys_kernel(const I* ids, int64_t n, int64_t vocab, uint32_t* keys, int32_t* positions,
                                      DeviceErrorRecord* errors) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t id = int64_t(ids[i]);
    const bool ok = id >= 0 && id < vocab;
    if (!ok) report_device_error(errors, kEmbeddingIdOutOfRange, id, i, vocab);
    keys[i] = ok ? uint32_t(id) : uint32_t(vocab);
    positions[i] = int32_t(i);
  }
}

__device__ __forceinline__ int digit_of(uint32_t key, int shift) { return int((key >> shift) & (kBuckets - 1)); }

// counts[digit * chunks + chunk] = elements of the chunk with that digit. One warp per chunk.
__global__ void radix_histogram_kernel(const uint32_t* keys, int64_t n, int shift, int chunks, int* counts) {
  __shared__ int bucket[kBuckets];
  const int lane = threadIdx.x, chunk = blockIdx.x;
  for (int d = lane; d < kBuckets; d += 32) bucket[d] = 0;
  __syncwarp();
  const int64_t begin = int64_t(chunk) * kSortChunk, end = min(n, begin + kSortChunk);
  for (int64_t base = begin; base < end; base += 32) {
    const int64_t i = base + lane;
    const int d = i < end ? digit_of(keys[i], shift) : kBuckets;  // kBuckets: a lane past the end
    const unsigned peers = __match_any_sync(0xffffffffu, d);
    if (d < kBuckets && lane == __ffs(peers) - 1) bucket[d] += __popc(peers);
    __syncwarp();
  }
  for (int d = lane; d < kBuckets; d += 32) counts[d * chunks + chunk] = bucket[d];
}

// In-place exclusive prefix sum of `count` ints by one block of 1024 threads, each owning a
// contiguous slice.
__global__ void exclusive_scan_kernel(int* data, int64_t count) {
  __shared__ int64_t scratch[32];
  const int64_t per_thread = (count + blockDim.x - 1) / blockDim.x;
  const int64_t begin = min(count, int64_t(threadIdx.x) * per_thread), end = min(count, begin + per_thread);
  int64_t local = 0;
  for (int64_t i = begin; i < end; ++i) local += data[i];
  // Exclusive scan of the per-thread totals across the block.
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int64_t inclusive = local;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const int64_t other = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive += other;
  }
  if (lane == 31) scratch[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    int64_t w = lane < int(blockDim.x / 32) ? scratch[lane] : 0;
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
      const int64_t other = __shfl_up_sync(0xffffffffu, w, offset);
      if (lane >= offset) w += other;
    }
    scratch[lane] = w;  // inclusive over warps
  }
  __syncthreads();
  int64_t running = inclusive - local + (warp > 0 ? scratch[warp - 1] : 0);
  for (int64_t i = begin; i < end; ++i) {
    const int v = data[i];
    data[i] = int(running);
    running += v;
  }
}

// Stable scatter: element i goes to offsets[digit, chunk] + (earlier elements of its chunk with that digit).
__global__ void radix_scatter_kernel(const uint32_t* keys_in, const int32_t* values_in, int64_t n, int shift,
                                     int chunks, const int* offsets, uint32_t* keys_out, int32_t* values_out) {
  __shared__ int next[kBuckets];
  const int lane = threadIdx.x, chunk = blockIdx.x;
  for (int d = lane; d < kBuckets; d += 32) next[d] = offsets[d * chunks + chunk];
  __syncwarp();
  const unsigned lower_lanes = (1u << lane) - 1;
  const int64_t begin = int64_t(chunk) * kSortChunk, end = min(n, begin + kSortChunk);
  for (int64_t base = begin; base < end; base += 32) {
    const int64_t i = base + lane;
    const uint32_t key = i < end ? keys_in[i] : 0;
    const int d = i < end ? digit_of(key, shift) : kBuckets;
    const unsigned peers = __match_any_sync(0xffffffffu, d);
    int slot = 0;
    if (d < kBuckets) {
      slot = next[d] + __popc(peers & lower_lanes);
      keys_out[slot] = key;
      values_out[slot] = values_in[i];
    }
    __syncwarp();  // every lane has read next[d] before its leader moves it on
    if (d < kBuckets && lane == __ffs(peers) - 1) next[d] += __popc(peers);
    __syncwarp();
  }
}

// ---- backward, step 2: segmented sums over the sorted order ----

constexpr int kSumThreads = 256;  // at most; one column each, blockIdx.y picks the slice of columns

template <typename G, typename D>
__global__ void embedding_chunk_sum_kernel(const uint32_t* keys, const int32_t* positions, const G* grad_out,
                                           D* grad_table, float* partial, int64_t n, int64_t dim, uint32_t skip_key,
                                           int chunk_len) {
  extern __shared__ unsigned char smem[];
  uint32_t* skey = reinterpret_cast<uint32_t*>(smem);
  int32_t* spos = reinterpret_cast<int32_t*>(skey + chunk_len);
  const int64_t begin = int64_t(blockIdx.x) * chunk_len;
  const int len = int(min(int64_t(chunk_len), n - begin));
  for (int e = threadIdx.x; e < len; e += blockDim.x) {
    skey[e] = keys[begin + e];
    spos[e] = positions[begin + e];
  }
  __syncthreads();
  const bool first_run_starts_segment = begin == 0 || keys[begin - 1] != skey[0];
  const bool last_run_ends_segment = begin + len == n || keys[begin + len] != skey[len - 1];
  const int64_t c = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c < dim) {
    float acc = 0;
    int run_start = 0;
    for (int e = 0; e < len; ++e) {
      acc += to_float(grad_out[int64_t(spos[e]) * dim + c]);
      const uint32_t key = skey[e];
      if (e + 1 < len && skey[e + 1] == key) continue;
      // The run [run_start, e] of `key` ends here.
      if (key != skip_key) {
        const bool starts = run_start > 0 || first_run_starts_segment;
        const bool ends = e + 1 < len || last_run_ends_segment;
        if (starts && ends) {
          D* dst = grad_table + int64_t(key) * dim + c;
          *dst = from_float<D>(to_float(*dst) + acc);
        } else {
          const int slot = run_start == 0 ? 0 : 1;
          partial[(int64_t(blockIdx.x) * 2 + slot) * dim + c] = acc;
        }
      }
      acc = 0;
      run_start = e + 1;
    }
  }
}

// For a segment that crosses chunk boundaries, the chunk where it starts adds its partials in order.
template <typename D>
__global__ void embedding_boundary_sum_kernel(const uint32_t* keys, const float* partial, D* grad_table, int64_t n,
                                              int64_t dim, uint32_t skip_key, int chunk_len) {
  const int64_t chunk = blockIdx.x, begin = chunk * chunk_len, end = min(n, begin + chunk_len);
  const uint32_t key = keys[end - 1];
  if (key == skip_key || end == n || keys[end] != key) return;  // the last run does not cross into the next chunk
  int slot = 1;
  if (keys[begin] == key) {  // the whole chunk is one run: it owns the segment only if it starts here
    if (begin > 0 && keys[begin - 1] == key) return;
    slot = 0;
  }
  const int64_t c = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c < dim) {
    float total = partial[(chunk * 2 + slot) * dim + c];
    for (int64_t next = chunk + 1;; ++next) {
      total += partial[(next * 2) * dim + c];
      const int64_t next_end = min(n, (next + 1) * chunk_len);
      if (!(keys[next_end - 1] == key && next_end < n && keys[next_end] == key)) break;
    }
    D* dst = grad_table + int64_t(key) * dim + c;
    *dst = from_float<D>(to_float(*dst) + total);
  }
}

// Entries per summing chunk: about 512 chunks for small batches, up to 1024 entries for large ones.
// A function of n only, so the summation order is fixed for a shape.
int sum_chunk_length(int64_t n) {
  int len = 32;
  while (len < 1024 && int64_t(len) * 512 < n) len *= 2;
  return len;
}

}  // namespace

Tensor embedding_forward(const Tensor& ids, const Tensor& table) {
  const int64_t n = ids.numel(), vocab = table.dim(0), dim = table.dim(1);
  std::vector<int64_t> out_dims = ids.shape().vec();
  out_dims.push_back(dim);
  Tensor out = Tensor::empty(Shape(out_dims), table.dtype(), table.device());
  if (out.numel() == 0) return out;
  cudaStream_t stream = stream_for(table.device());
  dispatch_device_float("embedding", table.dtype(), [&]<typename T>() {
    dispatch_index("embedding", "ids", ids.dtype(), [&]<typename I>() {
      const I* idp = static_cast<const I*>(ids.raw());
      const T* tp = static_cast<const T*>(table.raw());
      T* op = static_cast<T*>(out.raw());
      constexpr int N = 16 / sizeof(T);
      if (dim % N == 0 && all_aligned(16, tp, op))
        embedding_forward_kernel<N>
            <<<grid_for(n * dim / N, 256), 256, 0, stream>>>(idp, tp, op, n, vocab, dim, device_error_record());
      else
        embedding_forward_kernel<1>
            <<<grid_for(n * dim, 256), 256, 0, stream>>>(idp, tp, op, n, vocab, dim, device_error_record());
      CUDA_CHECK_LAUNCH();
    });
  });
  return out;
}

void embedding_backward(const Tensor& ids, const Tensor& grad_out, Tensor& grad_table) {
  const int64_t n = ids.numel(), vocab = grad_table.dim(0), dim = grad_table.dim(1);
  if (n == 0 || dim == 0) return;
  FATHOM_CHECK(n < (int64_t(1) << 31), "embedding_backward: the CUDA kernel takes fewer than 2^31 ids, got ", n);
  FATHOM_CHECK(vocab < (int64_t(1) << 31), "embedding_backward: vocabulary ", vocab,
               " is too large for the CUDA kernel");
  const Device device = grad_table.device();
  cudaStream_t stream = stream_for(device);

  // 1. Sort (id, position) by id, stably.
  Tensor keys[2] = {Tensor::empty({n}, DType::i32, device), Tensor::empty({n}, DType::i32, device)};
  Tensor positions[2] = {Tensor::empty({n}, DType::i32, device), Tensor::empty({n}, DType::i32, device)};
  auto key_ptr = [&](int i) { return static_cast<uint32_t*>(keys[i].raw()); };
  auto pos_ptr = [&](int i) { return static_cast<int32_t*>(positions[i].raw()); };
  dispatch_index("embedding_backward", "ids", ids.dtype(), [&]<typename I>() {
    embedding_keys_kernel<I><<<grid_for(n, 256), 256, 0, stream>>>(static_cast<const I*>(ids.raw()), n, vocab,
                                                                   key_ptr(0), pos_ptr(0), device_error_record());
    CUDA_CHECK_LAUNCH();
  });
  const int key_bits = std::bit_width(uint64_t(vocab));  // keys run up to vocab (the skip bucket)
  const int chunks = int((n + kSortChunk - 1) / kSortChunk);
  Tensor counts = Tensor::empty({int64_t(kBuckets) * chunks}, DType::i32, device);
  int* cp = static_cast<int*>(counts.raw());
  int current = 0;
  for (int shift = 0; shift < key_bits; shift += kDigitBits) {
    radix_histogram_kernel<<<chunks, 32, 0, stream>>>(key_ptr(current), n, shift, chunks, cp);
    CUDA_CHECK_LAUNCH();
    exclusive_scan_kernel<<<1, 1024, 0, stream>>>(cp, int64_t(kBuckets) * chunks);
    CUDA_CHECK_LAUNCH();
    radix_scatter_kernel<<<chunks, 32, 0, stream>>>(key_ptr(current), pos_ptr(current), n, shift, chunks, cp,
                                                    key_ptr(1 - current), pos_ptr(1 - current));
    CUDA_CHECK_LAUNCH();
    current = 1 - current;
  }

  // 2. Segmented sums in fixed chunks of the sorted order.
  const int chunk_len = sum_chunk_length(n);
  const int64_t sum_chunks = (n + chunk_len - 1) / chunk_len;
  Tensor partial = Tensor::empty({sum_chunks * 2 * dim}, DType::f32, device);
  float* pp = static_cast<float*>(partial.raw());
  const size_t smem = size_t(chunk_len) * (sizeof(uint32_t) + sizeof(int32_t));
  dispatch_device_float("embedding_backward", grad_out.dtype(), [&]<typename G>() {
    dispatch_device_float("embedding_backward", grad_table.dtype(), [&]<typename D>() {
      if constexpr (std::is_same_v<G, D> || std::is_same_v<D, float>) {
        D* dt = static_cast<D*>(grad_table.raw());
        const int threads = int(std::min<int64_t>(kSumThreads, (dim + 31) / 32 * 32));
        const dim3 grid(unsigned(sum_chunks), unsigned((dim + threads - 1) / threads));
        embedding_chunk_sum_kernel<G, D><<<grid, threads, smem, stream>>>(key_ptr(current), pos_ptr(current),
                                                                          static_cast<const G*>(grad_out.raw()), dt, pp,
                                                                          n, dim, uint32_t(vocab), chunk_len);
        CUDA_CHECK_LAUNCH();
        embedding_boundary_sum_kernel<D>
            <<<grid, threads, 0, stream>>>(key_ptr(current), pp, dt, n, dim, uint32_t(vocab), chunk_len);
        CUDA_CHECK_LAUNCH();
      } else {
        FATHOM_FAIL("embedding_backward: an F32 gradient cannot accumulate into a BF16 table gradient");
      }
    });
  });
}

}  // namespace fathom::cuda
