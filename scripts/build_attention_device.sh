#!/usr/bin/env bash
# Builds the flash-attention GPU test and benchmark (and optionally the tile sweep) as self-contained
# x86-64 binaries, without the CMake build: cudart, libstdc++ and libgomp are linked statically, so the
# binaries run on a GPU machine that has the NVIDIA driver and the CUDA toolkit's cuBLAS (no Eigen, yaml-cpp
# or GoogleTest; the runtime links cuBLAS for its error names).
# Needs nvcc (CUDA 13), g++ with C++20, Eigen3 and GoogleTest (static) where it runs.
# Usage: scripts/build_attention_device.sh OUT_DIR [--tune]
set -euo pipefail
out=${1:?usage: scripts/build_attention_device.sh OUT_DIR [--tune]}
tune=${2:-}
cd "$(dirname "$0")/.."
src=$(pwd)
mkdir -p "$out" build-device
obj=$src/build-device
defs=(-DFATHOM_SOURCE_DIR="\"$src\"" -DFATHOM_WITH_CUDA=1)
cxx=(g++ -std=c++20 -O2 -fopenmp -Wall -Wextra -Wno-unused-parameter -I"$src" -I/usr/include/eigen3
     -I/usr/local/cuda/include "${defs[@]}")
nvcc=(nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a -DFATHOM_WGMMA=1 -I"$src" "${defs[@]}")
link=(-L/usr/local/cuda/lib64 -lcublas -lcublasLt -lcudart_static -ldl -lrt -lpthread -static-libstdc++ -static-libgcc
      -Wl,-Bstatic -lgomp -Wl,-Bdynamic)

# The CPU reference and the parts of core/ it needs.
cpu_objs=()
# The CUDA runtime (device allocator and stream registry) that Tensor's device paths call.
for f in core/tensor.cpp core/shape.cpp core/dtype.cpp core/allocator.cpp core/error.cpp core/random.cpp \
         core/backend.cpp kernels/attention/attention_cpu.cpp kernels/dispatch.cpp kernels/runtime/runtime_cuda.cpp \
         kernels/runtime/caching_allocator_cuda.cpp kernels/hopper/tma_map_cuda.cpp; do
  o=$obj/$(echo "$f" | tr / _).o
  [ "$o" -nt "$f" ] || "${cxx[@]}" -c "$f" -o "$o"
  cpu_objs+=("$o")
done
[ "$obj/tensor_ops.o" -nt kernels/runtime/tensor_ops.cu ] || "${nvcc[@]}" -c kernels/runtime/tensor_ops.cu -o "$obj/tensor_ops.o"
cpu_objs+=("$obj/tensor_ops.o")
"${nvcc[@]}" -Xptxas -v -c kernels/attention/flash_attention.cu -o "$obj/attention.o" 2> "$obj/ptxas.log" || { cat "$obj/ptxas.log"; exit 1; }
# CUDA attention_forward runs the fp32 kernels for F32 inputs.
"${nvcc[@]}" -c kernels/attention/attention_fp32.cu -o "$obj/attention_fp32.o"
attention_objs=("$obj/attention.o" "$obj/attention_fp32.o")
"${cxx[@]}" -c tests/kernels/test_gpu_attention.cpp -o "$obj/test_gpu_attention.o"
g++ -fopenmp "$obj/test_gpu_attention.o" "${attention_objs[@]}" "${cpu_objs[@]}" -lgtest_main -lgtest "${link[@]}" \
    -o "$out/gpu_attention_tests"
"${cxx[@]}" -c bench/bench_attention.cpp -o "$obj/bench_attention.o"
g++ -fopenmp "$obj/bench_attention.o" "${attention_objs[@]}" "${cpu_objs[@]}" "${link[@]}" -o "$out/bench_attention"
if [ "$tune" = --tune ]; then
  "${nvcc[@]}" -c bench/tune_attention.cu -o "$obj/tune_attention.o"
  g++ -fopenmp "$obj/tune_attention.o" "${attention_objs[@]}" "${cpu_objs[@]}" "${link[@]}" -o "$out/tune_attention"
fi
cp bench/attention_reference.py "$out/"
echo "built into $out (register/spill report: build-device/ptxas.log)"
