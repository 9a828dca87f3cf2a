#include "train/measure/metrics_log.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/file_io.h"
#include "core/json.h"

namespace fathom {

namespace {
// A metrics line as a JSON map, or a null node when the line cannot be read.
YAML::Node parse_line(const std::string& line) {
  try {
    const YAML::Node node = parse_json(line, "metrics.jsonl");
    return node.IsMap() ? node : YAML::Node();
  } catch (const Error&) {
    return YAML::Node();
  }
}

// The "step" of a metrics line, or -1 when the line cannot be read.
int64_t line_step(const YAML::Node& node) {
  int64_t step = -1;
  return node.IsMap() && node["step"] && json_integer(node["step"], step) ? step : -1;
}
}  // namespace

MetricsLog::MetricsLog(const std::filesystem::path& run_dir, int64_t resume_step) : path_(run_dir / "metrics.jsonl") {
  if (resume_step == 0) {
    write_file_atomically(path_, "");
    return;
  }
  if (!std::filesystem::exists(path_)) return;
  std::ifstream in(path_);
  std::string kept, line;
  while (std::getline(in, line)) {
    const int64_t step = line_step(parse_line(line));
    if (step >= 0 && step <= resume_step) kept += line + "\n";
  }
  write_file_atomically(path_, kept);
}

void MetricsLog::write(const std::string& kind, int64_t step,
                       const std::vector<std::pair<std::string, double>>& fields) {
  JsonWriter w;
  w.begin_object().key("kind").value(kind).key("step").value(step);
  for (const auto& [name, value] : fields) {
    w.key(name);
    if (std::isfinite(value))
      w.value(value);
    else
      w.null();
  }
  w.end_object();
  std::ofstream out(path_, std::ios::app);
  out << w.str() << "\n";
  out.flush();
  FATHOM_CHECK(out.good(), "cannot append to the metrics log ", path_, " (", std::strerror(errno),
               "); free disk space or fix the folder's permissions, then train --resume from the last checkpoint");
}

bool MetricsLog::holds(const std::string& kind, int64_t step, const std::string& field) const {
  std::ifstream in(path_);
  std::string line;
  while (std::getline(in, line)) {
    const YAML::Node node = parse_line(line);
    if (line_step(node) == step && node["kind"] && node["kind"].IsScalar() && node["kind"].Scalar() == kind &&
        node[field])
      return true;
  }
  return false;
}

std::string format_duration(double seconds) {
  const long long s = std::llround(std::max(seconds, 0.0));
  char buf[64];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", s / 3600, (s / 60) % 60);
  else if (s >= 60)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", s / 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%llds", s);
  return buf;
}

namespace {
// 12345.6 -> "12,346"
std::string with_thousands(double value) {
  const std::string digits = std::to_string(std::llround(value));
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && digits[i - 1] != '-' && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}
}  // namespace

std::string format_progress(const Progress& p) {
  char buf[320];
  int n =
      std::snprintf(buf, sizeof buf, "step %lld/%lld | loss %.4f | lr %.2e | gnorm %.3f | %s tok/s", (long long)p.step,
                    (long long)p.total_steps, p.loss, p.lr, p.grad_norm, with_thousands(p.tokens_per_second).c_str());
  if (p.mfu >= 0) n += std::snprintf(buf + n, sizeof buf - size_t(n), " | MFU %.1f%%", 100.0 * p.mfu);
  if (p.memory_gib >= 0)
    n += std::snprintf(buf + n, sizeof buf - size_t(n), " | mem %.1f/%.1f GiB", p.memory_gib, p.peak_memory_gib);
  std::snprintf(buf + n, sizeof buf - size_t(n), " | ETA %s", format_duration(p.eta_seconds).c_str());
  return buf;
}

}  // namespace fathom
