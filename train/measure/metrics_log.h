// Run metrics: one JSON object per line in <run>/metrics.jsonl, and the console progress line.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace fathom {

class MetricsLog {
 public:
  // Opens <run_dir>/metrics.jsonl for appending. When resuming from `resume_step`, lines of later
  // steps (written after that checkpoint by the interrupted run) are dropped first.
  MetricsLog(const std::filesystem::path& run_dir, int64_t resume_step);
  // Appends {"kind": kind, "step": step, <fields>} and flushes.
  void write(const std::string& kind, int64_t step, const std::vector<std::pair<std::string, double>>& fields);
  // Whether a record of `kind` at `step` holds `field` (an evaluation a resumed run must not repeat).
  bool holds(const std::string& kind, int64_t step, const std::string& field) const;

 private:
  std::filesystem::path path_;
};

struct Progress {
  int64_t step = 0, total_steps = 0;
  double loss = 0, lr = 0, grad_norm = 0, tokens_per_second = 0, eta_seconds = 0;
  double mfu = -1;         // shown when >= 0
  double memory_gib = -1;  // device memory held by tensors, shown when >= 0
  double peak_memory_gib = -1;
};
std::string format_progress(const Progress& p);
std::string format_duration(double seconds);  // "1h02m", "3m07s", "12s"

}  // namespace fathom
