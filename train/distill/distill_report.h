// The table of a distillation (DESIGN.md 4.4), distill.md and distill.json in the run folder:
// per nested model M_k, the layers converted and which, the fraction, validation loss and perplexity
// per domain against the teacher's, the KV-cache bytes the converted layers save per 1000 tokens and
// the measured decode speed.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "layers/decoder.h"
#include "train/measure/evaluator.h"

namespace fathom {

struct ModelMeasures {
  std::map<std::string, EvalResult> validation;  // by domain
  double kv_bytes_per_1k_tokens = 0;             // the decode state's bytes per position, times 1000
  double decode_tokens_per_second = 0;           // batch 1, one token per step, head included
  // A distilled model's training (0 for the teacher): its layer's wall time from the run's start to
  // its last checkpoint, and on a GPU the live-tensor high-water mark over those steps and the
  // memory plan's estimate for them (bytes).
  double train_seconds = 0;
  double peak_memory_bytes = 0;
  double planned_memory_bytes = 0;
};

struct DistilledModel {
  int64_t k = 0;
  std::vector<int64_t> layers;       // converted, in the order they were
  double fraction = 0;               // k / n_layers
  bool named = false;                // a fraction distill.layers gave (or any k when it gave a count)
  std::filesystem::path checkpoint;  // its run folder; empty once an intermediate model's checkpoints are released
  ModelMeasures measures;
};

// What a model's decode state costs and how fast it decodes `tokens` tokens after a one-token prompt.
ModelMeasures measure_decoding(const Decoder& model, DType activations, Device device, int64_t tokens = 32);

// One model's measures as recorded beside its checkpoint, so that a resumed chain reads a finished
// model's results back instead of measuring it again. eval_batches is the eval.batches they came from.
void write_measures(const std::filesystem::path& file, const ModelMeasures& measures, int64_t eval_batches);
// The recorded measures; nullopt when the file is missing, or holds an evaluation of other
// eval.batches or other validation domains (both may change on resume). A malformed file is an error.
std::optional<ModelMeasures> read_measures(const std::filesystem::path& file, int64_t eval_batches,
                                           const std::vector<std::string>& domains);

void write_distill_report(const std::filesystem::path& folder, const ModelMeasures& teacher,
                          const std::vector<DistilledModel>& models);

}  // namespace fathom
