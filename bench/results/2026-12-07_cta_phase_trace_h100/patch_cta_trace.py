# Diagnostic only: adds per-CTA phase records (cta_trace.cuh, beside it) to the few-rows decode attention kernel and the
# skinny GEMM, and their dump to bench_generate (CTA_TRACE_DIR). Run from the repository root.
import re
def patch(path, pairs):
    s = open(path).read()
    for old, new in pairs:
        assert s.count(old) == 1, (path, old)
        s = s.replace(old, new)
    open(path, 'w').write(s)

A = 'kernels/attention/decode_attention.cu'
put_a = ('cta_trace::put(attention_records, &attention_count, tr_clock, (unsigned(a.length) << 8) | 1u, '
         'gridDim.x * gridDim.y * gridDim.z, (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x)')
patch(A, [
    ('#include "kernels/runtime/runtime.h"\n\nnamespace fathom::cuda {\n',
     '#include "kernels/runtime/runtime.h"\n#include "bench/results/2026-12-07_cta_phase_trace_h100/cta_trace.cuh"\nCTA_TRACE_BUFFER(attention)\n\nnamespace fathom::cuda {\n'),
    ('  constexpr bool kCluster = kMerge == DecodeMerge::cluster;\n  if constexpr (kCluster) cluster_arrive_relaxed();',
     '  cta_trace::Clock tr_clock;\n  tr_clock.start();\n  constexpr bool kCluster = kMerge == DecodeMerge::cluster;\n  if constexpr (kCluster) cluster_arrive_relaxed();'),
    ('  follow_previous_grid();                            // dependent_launch.cuh\n',
     '  follow_previous_grid();                            // dependent_launch.cuh\n  tr_clock.mark(1);\n'),
    ('  // Every lane runs the same steps', '  tr_clock.mark(2);\n  // Every lane runs the same steps'),
    ('  // Two softmax partials (m, l, acc) of the same row as one.', '  tr_clock.mark(3);\n  // Two softmax partials (m, l, acc) of the same row as one.'),
    ('  if constexpr (kCluster) cluster_wait_acquire();  // every block of the cluster has started\n',
     '  tr_clock.mark(4);\n  if constexpr (kCluster) cluster_wait_acquire();  // every block of the cluster has started\n  tr_clock.mark(5);\n'),
    ('  if constexpr (kMerge == DecodeMerge::combine_kernel) return;',
     '  if constexpr (kMerge == DecodeMerge::combine_kernel) {\n    if (tid == 0) ' + put_a + ';\n    return;\n  }'),
    ('    cluster_wait_acquire();\n    if (split != 0 || warp >= rows) return;\n    combine_row<D>(a, out_row, lane, ClusterPartials<D, NR>{slot_acc, slot_ml, warp});\n    return;',
     '    cluster_wait_acquire();\n    tr_clock.mark(6);\n    if (split != 0 || warp >= rows) {\n      if (tid == 0) ' + put_a + ';\n      return;\n    }\n'
     '    combine_row<D>(a, out_row, lane, ClusterPartials<D, NR>{slot_acc, slot_ml, warp});\n    tr_clock.mark(7);\n    if (tid == 0) ' + put_a + ';\n    return;'),
    ('  if (!last) return;', '  tr_clock.mark(6);\n  if (!last) {\n    if (tid == 0) ' + put_a + ';\n    return;\n  }'),
    ('  if (tid == 0) *counter = 0;', '  if (tid == 0) *counter = 0;\n  tr_clock.mark(7);\n  if (tid == 0) ' + put_a + ';'),
])

S = 'kernels/matmul/skinny_matmul.cu'
put_s = ('cta_trace::put(skinny_records, &skinny_count, tr_clock, (unsigned(K) << 8) | unsigned(2 + int(kStep) + '
         '(kGated ? 8 : 0) + (kClustered ? 16 : 0)), gridDim.x, blockIdx.x)')
patch(S, [
    ('#include "kernels/runtime/runtime.h"\n\nnamespace fathom::cuda {\n',
     '#include "kernels/runtime/runtime.h"\n#include "bench/results/2026-12-07_cta_phase_trace_h100/cta_trace.cuh"\nCTA_TRACE_BUFFER(skinny)\n\nnamespace fathom::cuda {\n'),
    ('  if constexpr (kClustered) cluster_arrive_relaxed();  // this CTA has started (cluster.cuh)\n',
     '  cta_trace::Clock tr_clock;\n  tr_clock.start();\n  if constexpr (kClustered) cluster_arrive_relaxed();  // this CTA has started (cluster.cuh)\n'),
    ('  wait_for_previous_grid();\n', '  wait_for_previous_grid();\n  tr_clock.mark(1);\n'),
    ('  // x\'s eight elements at k: from the staged rows', '  tr_clock.mark(2);\n  // x\'s eight elements at k: from the staged rows'),
    ('  allow_dependent_grids();\n#pragma unroll\n  for (int j = 0; j < kTiles; ++j) {\n    partial[warp]',
     '  allow_dependent_grids();\n  tr_clock.mark(3);\n#pragma unroll\n  for (int j = 0; j < kTiles; ++j) {\n    partial[warp]'),
    ('  __syncthreads();\n  // Thread i writes outputs', '  __syncthreads();\n  tr_clock.mark(4);\n  // Thread i writes outputs'),
    ('      y[int64_t(m) * N + n] = from_float<Out>(sum);\n    }\n  }\n}\n',
     '      y[int64_t(m) * N + n] = from_float<Out>(sum);\n    }\n  }\n  tr_clock.mark(5);\n  if (threadIdx.x == 0) ' + put_s + ';\n}\n'),
])

B = 'bench/bench_generate.cpp'
patch(B, [
    ('int main(int argc, char** argv) {\n',
     'extern "C" void cta_trace_dump_attention(const char*);\nextern "C" void cta_trace_dump_skinny(const char*);\n'
     'int main(int argc, char** argv) {\n'),
    ('#include <algorithm>\n', '#include <algorithm>\n#include <cstdlib>\n'),
    ('    run(a);\n',
     '    run(a);\n    if (const char* dir = std::getenv("CTA_TRACE_DIR")) {\n'
     '      cta_trace_dump_attention((std::string(dir) + "/attention.bin").c_str());\n'
     '      cta_trace_dump_skinny((std::string(dir) + "/skinny.bin").c_str());\n    }\n'),
])
print("patched")
