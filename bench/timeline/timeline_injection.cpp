// A CUDA injection library that records the device timeline of any program (kernels, copies,
// memsets, runtime API calls) with CUPTI and writes it as CSV when the program exits. It answers
// "where is the GPU idle, and what was the host doing then", which kernel-duration profilers cannot.
//
//   CUDA_INJECTION64_PATH=build/bench/libfathom_timeline.so FATHOM_TIMELINE=timeline.csv bench_train_step ...
//   python3 bench/timeline/gaps.py timeline.csv
//
// Rows: kind,start_ns,end_ns,stream,name   (kind K kernel, C copy, S memset, A runtime API call)
#include <cupti.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace {

constexpr size_t kBufferBytes = 8 << 20;
std::FILE* out = nullptr;
std::mutex out_mutex;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

void write_record(const CUpti_Activity* r) {
  switch (r->kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    case CUPTI_ACTIVITY_KIND_KERNEL: {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(r);
      std::fprintf(out, "K,%llu,%llu,%u,\"%s\"\n", (unsigned long long)k->start, (unsigned long long)k->end,
                   k->streamId, k->name);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto* c = reinterpret_cast<const CUpti_ActivityMemcpy6*>(r);
      std::fprintf(out, "C,%llu,%llu,%u,\"copy kind %u, %llu bytes\"\n", (unsigned long long)c->start,
                   (unsigned long long)c->end, c->streamId, unsigned(c->copyKind), (unsigned long long)c->bytes);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto* s = reinterpret_cast<const CUpti_ActivityMemset4*>(r);
      std::fprintf(out, "S,%llu,%llu,%u,\"memset %llu bytes\"\n", (unsigned long long)s->start,
                   (unsigned long long)s->end, s->streamId, (unsigned long long)s->bytes);
      break;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME: {
      const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(r);
      const char* name = nullptr;
      if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, a->cbid, &name) != CUPTI_SUCCESS) name = "?";
      std::fprintf(out, "A,%llu,%llu,0,\"%s\"\n", (unsigned long long)a->start, (unsigned long long)a->end, name);
      break;
    }
    default:
      break;
  }
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  {
    std::lock_guard<std::mutex> lock(out_mutex);
    CUpti_Activity* record = nullptr;
    while (out && cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) write_record(record);
  }
  std::free(buffer);
}

void finish() {
  cuptiActivityFlushAll(1);
  std::lock_guard<std::mutex> lock(out_mutex);
  if (out) std::fclose(out);
  out = nullptr;
}

}  // namespace

extern "C" int InitializeInjection() {
  const char* path = std::getenv("FATHOM_TIMELINE");
  out = std::fopen(path ? path : "timeline.csv", "w");
  if (!out) return 0;
  std::fprintf(out, "kind,start_ns,end_ns,stream,name\n");
  cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
  for (CUpti_ActivityKind kind : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                  CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_RUNTIME})
    cuptiActivityEnable(kind);
  std::atexit(finish);
  return 1;
}
