#include "train/distill/distill_report.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/json.h"
#include "train/cli/device_select.h"

namespace fathom {

namespace {

std::string fixed(double v, int digits) {
  char text[48];
  std::snprintf(text, sizeof text, "%.*f", digits, v);
  return text;
}

// A number of distill.json: JSON has no NaN or infinity, so a diverged model's loss is null.
std::string json_fixed(double v, int digits) { return std::isfinite(v) ? fixed(v, digits) : "null"; }

// " text |": a Markdown table cell after its opening bar. Appended piece by piece: GCC 12 warns
// (-Wrestrict, a false positive) on a literal + a temporary string.
std::string cell(const std::string& text) {
  std::string out = " ";
  out += text;
  out += " |";
  return out;
}

std::string layer_list(const std::vector<int64_t>& layers) {
  std::string text;
  for (size_t i = 0; i < layers.size(); ++i) text += (i ? ", " : "") + std::to_string(layers[i]);
  return text;
}

}  // namespace

ModelMeasures measure_decoding(const Decoder& model, DType activations, Device device, int64_t tokens) {
  NoGrad no_grad;
  ModelMeasures m;
  const int64_t vocab = model.config().vocab_size;
  // The fastest of three passes: a shared machine's stalls slow single passes, never speed them up.
  for (int pass = 0; pass < 3; ++pass) {
    DecodeState state = model.start_decoding(1, tokens + 1, activations, device);
    m.kv_bytes_per_1k_tokens = double(state.bytes_per_position()) * 1000.0;
    auto next = [&](int64_t i) {
      const Tensor ids = Tensor::from_vector(std::vector<int32_t>{int32_t(i % vocab)}, Shape{1, 1}).to(device);
      const Variable h = model.decode(ids, state);
      // The head too, and its result on the host: a decode step is done when its logits are.
      (void)linear(reshape(h, {1, model.config().d_model}), model.head_weight()).value().to(Device::cpu());
    };
    next(0);
    const auto start = std::chrono::steady_clock::now();
    for (int64_t i = 1; i <= tokens; ++i) next(i);
    synchronize(device);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    m.decode_tokens_per_second = std::max(m.decode_tokens_per_second, double(tokens) / std::max(seconds, 1e-9));
  }
  return m;
}

void write_measures(const std::filesystem::path& file, const ModelMeasures& measures, int64_t eval_batches) {
  JsonWriter w;
  w.begin_object().key("eval_batches").value(eval_batches).key("validation").begin_object();
  for (const auto& [domain, e] : measures.validation)
    w.key(domain)
        .begin_object()
        .key("loss")
        .number_or_null(e.loss)
        .key("perplexity")
        .number_or_null(e.perplexity)
        .key("tokens")
        .value(e.tokens)
        .end_object();
  w.end_object()
      .key("kv_bytes_per_1k_tokens")
      .value(measures.kv_bytes_per_1k_tokens)
      .key("decode_tokens_per_second")
      .value(measures.decode_tokens_per_second)
      .key("train_seconds")
      .value(measures.train_seconds)
      .key("peak_memory_bytes")
      .value(measures.peak_memory_bytes)
      .key("planned_memory_bytes")
      .value(measures.planned_memory_bytes)
      .end_object();
  write_file_atomically(file, w.str() + "\n");
}

std::optional<ModelMeasures> read_measures(const std::filesystem::path& file, int64_t eval_batches,
                                           const std::vector<std::string>& domains) {
  std::error_code error;
  if (!std::filesystem::exists(file, error)) return std::nullopt;
  const std::string source = file.string();
  const YAML::Node root = parse_json(read_file(file), source);
  auto number = [&](const YAML::Node& parent, const char* key) {
    FATHOM_CHECK(parent.IsMap() && parent[key] && parent[key].IsScalar() && parent[key].Tag() == "?", source, ": '",
                 key, "' must be a number (delete the file to measure the model again)");
    return parent[key].as<double>();
  };
  // A diverged model's loss and perplexity are null (write_measures).
  auto measured = [&](const YAML::Node& parent, const char* key) {
    return parent.IsMap() && parent[key] && parent[key].IsNull() ? std::numeric_limits<double>::quiet_NaN()
                                                                 : number(parent, key);
  };
  int64_t batches = 0;
  FATHOM_CHECK(root.IsMap() && root["eval_batches"] && json_integer(root["eval_batches"], batches), source,
               ": 'eval_batches' must be an integer (delete the file to measure the model again)");
  const YAML::Node validation = root["validation"];
  FATHOM_CHECK(validation && validation.IsMap(), source, ": 'validation' must be an object");
  if (batches != eval_batches || validation.size() != domains.size()) return std::nullopt;
  ModelMeasures m;
  for (const std::string& domain : domains) {
    if (!validation[domain]) return std::nullopt;
    EvalResult& e = m.validation[domain];
    e.loss = measured(validation[domain], "loss");
    e.perplexity = measured(validation[domain], "perplexity");
    e.tokens = int64_t(number(validation[domain], "tokens"));
  }
  m.kv_bytes_per_1k_tokens = number(root, "kv_bytes_per_1k_tokens");
  m.decode_tokens_per_second = number(root, "decode_tokens_per_second");
  m.train_seconds = number(root, "train_seconds");
  m.peak_memory_bytes = number(root, "peak_memory_bytes");
  m.planned_memory_bytes = number(root, "planned_memory_bytes");
  return m;
}

void write_distill_report(const std::filesystem::path& folder, const ModelMeasures& teacher,
                          const std::vector<DistilledModel>& models) {
  std::string md = "# Distillation\n\n| model | layers converted | which | fraction |";
  std::string rule = "|---|---|---|---|";
  for (const auto& [domain, e] : teacher.validation) {
    md += " val loss " + domain + " (teacher) | val PPL " + domain + " (teacher) |";
    rule += "---|---|";
  }
  md += " KV-cache bytes saved / 1,000 tokens | decode tokens/s | layer train s | peak memory GiB (plan) |\n" + rule +
        "---|---|---|---|\n";
  md += "| teacher | 0 | | 0 |";
  for (const auto& [domain, e] : teacher.validation) md += cell(fixed(e.loss, 4)) + cell(fixed(e.perplexity, 3));
  md += " 0 | " + fixed(teacher.decode_tokens_per_second, 1) + " | | |\n";

  std::string json = "{\"teacher\": {\"validation\": {";
  bool first = true;
  for (const auto& [domain, e] : teacher.validation) {
    json += std::string(first ? "" : ", ") + "\"" + domain + "\": {\"loss\": " + json_fixed(e.loss, 6) +
            ", \"ppl\": " + json_fixed(e.perplexity, 6) + "}";
    first = false;
  }
  json += "}, \"kv_bytes_per_1k_tokens\": " + json_fixed(teacher.kv_bytes_per_1k_tokens, 0) +
          ", \"decode_tokens_per_second\": " + json_fixed(teacher.decode_tokens_per_second, 3) + "}, \"models\": [";
  for (size_t i = 0; i < models.size(); ++i) {
    const DistilledModel& m = models[i];
    const double saved = teacher.kv_bytes_per_1k_tokens - m.measures.kv_bytes_per_1k_tokens;
    md += "| M_" + std::to_string(m.k) +
          (m.named                ? ""
           : m.checkpoint.empty() ? " (intermediate, not kept)"
                                  : " (intermediate)") +
          " | " + std::to_string(m.k) + " | " + layer_list(m.layers) + " | " + fixed(m.fraction, 3) + " |";
    json += std::string(i ? ", " : "") + "{\"k\": " + std::to_string(m.k) + ", \"layers\": [" + layer_list(m.layers) +
            "], \"fraction\": " + json_fixed(m.fraction, 6) + ", \"named\": " + (m.named ? "true" : "false") +
            ", \"checkpoint\": \"" + m.checkpoint.string() + "\", \"validation\": {";
    first = true;
    for (const auto& [domain, t] : teacher.validation) {
      const auto it = m.measures.validation.find(domain);
      const EvalResult e = it == m.measures.validation.end() ? EvalResult{} : it->second;
      md += cell(fixed(e.loss, 4) + " (" + fixed(t.loss, 4) + ")") +
            cell(fixed(e.perplexity, 3) + " (" + fixed(t.perplexity, 3) + ")");
      json += std::string(first ? "" : ", ") + "\"" + domain + "\": {\"loss\": " + json_fixed(e.loss, 6) +
              ", \"ppl\": " + json_fixed(e.perplexity, 6) + ", \"teacher_loss\": " + json_fixed(t.loss, 6) +
              ", \"teacher_ppl\": " + json_fixed(t.perplexity, 6) + "}";
      first = false;
    }
    const double gib = double(size_t(1) << 30);
    md += cell(fixed(saved, 0)) + cell(fixed(m.measures.decode_tokens_per_second, 1)) +
          cell(fixed(m.measures.train_seconds, 1)) + " " +
          (m.measures.peak_memory_bytes > 0 ? fixed(m.measures.peak_memory_bytes / gib, 2) + " (" +
                                                  fixed(m.measures.planned_memory_bytes / gib, 2) + ")"
                                            : std::string("-")) +
          " |\n";
    json += "}, \"kv_bytes_saved_per_1k_tokens\": " + json_fixed(saved, 0) +
            ", \"decode_tokens_per_second\": " + json_fixed(m.measures.decode_tokens_per_second, 3) +
            ", \"train_seconds\": " + json_fixed(m.measures.train_seconds, 3) +
            ", \"peak_memory_bytes\": " + json_fixed(m.measures.peak_memory_bytes, 0) +
            ", \"planned_memory_bytes\": " + json_fixed(m.measures.planned_memory_bytes, 0) + "}";
  }
  json += "]}\n";
  write_file_atomically(folder / "distill.md", md);
  write_file_atomically(folder / "distill.json", json);
}

}  // namespace fathom
