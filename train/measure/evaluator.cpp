#include "train/measure/evaluator.h"

#include <cmath>
#include <cstdio>
#include <ostream>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/suggest.h"
#include "data/eval_iterator.h"
#include "distributed/communicator.h"
#include "train/checkpoint/checkpoint.h"
#include "train/cli/device_select.h"
#include "train/generate/inference_model.h"
#include "train/recipe/recipe.h"
#include "train/run/run_data.h"

namespace fathom {

namespace {

// The kind metrics `model`'s layers report, each with its summed measures still zero.
std::vector<LayerMetricMeasures> reported_metrics(const Decoder& model) {
  std::vector<LayerMetricMeasures> out;
  for (const LayerKind& kind : layer_kinds())
    for (const KindMetric& metric : kind.metrics)
      for (int64_t l = 0; l < int64_t(model.blocks().size()); ++l)
        if (metric.reported_by(model.config(), l)) out.push_back({l, kind.name, metric, {}});
  return out;
}

// Sums every rank's measures (each rank counted only its own batches), in one reduction.
void sum_over_ranks(std::vector<LayerMetricMeasures>& metrics, Communicator& comm) {
  std::vector<double> values;
  for (const LayerMetricMeasures& m : metrics)
    for (const std::string& name : m.metric.measures)
      values.push_back(m.measures.contains(name) ? m.measures.at(name) : 0.0);
  if (values.empty()) return;
  comm.all_reduce_sum(values.data(), int64_t(values.size()));
  size_t i = 0;
  for (LayerMetricMeasures& m : metrics)
    for (const std::string& name : m.metric.measures) m.measures[name] = values[i++];
}

}  // namespace

EvalResult evaluate(const Decoder& model, std::shared_ptr<const TokenSource> source, int64_t batch_size,
                    int64_t seq_len, int64_t max_batches, Device device, bool as_decoded, Communicator* ranks) {
  NoGrad no_grad;
  EvalIterator batches(std::move(source), batch_size, seq_len, max_batches);
  const int rank = ranks ? ranks->rank() : 0;
  const int world = ranks ? ranks->world() : 1;
  // Per batch: its summed token losses and its token count. A rank fills only its own batches
  // (b % world == rank), so after the sum over ranks every slot holds one rank's value exactly, and
  // the total adds the batches in order: the same figure as one process evaluating them all.
  std::vector<double> loss_sums(size_t(batches.num_batches()), 0.0);
  std::vector<double> token_counts(loss_sums.size(), 0.0);
  EvalResult result;
  result.layer_metrics = reported_metrics(model);
  ForwardOptions options;
  options.as_decoded = as_decoded;
  for (const LayerMetricMeasures& m : result.layer_metrics) options.taps.insert(m.metric.tap);
  for (size_t b = 0; b < loss_sums.size(); ++b) {
    if (int(b % size_t(world)) != rank) {
      batches.skip();
      continue;
    }
    const std::optional<TokenBatch> batch = batches.next();
    const int64_t rows = batch->inputs.dim(0) * batch->inputs.dim(1);
    const ModelOutput output = model.forward(batch->inputs.to(device), options);
    for (LayerMetricMeasures& m : result.layer_metrics) {
      const LayerMeasures& measured = output.measures[size_t(m.layer)];
      for (const std::string& name : m.metric.measures)
        if (measured.contains(name)) m.measures[name] += measured.at(name);
    }
    const Variable logits = linear(output.hidden, model.head_weight());
    const LossParts loss =
        cross_entropy(reshape(logits, {rows, model.config().vocab_size}), batch->targets.to(device).view({rows}), 0.0);
    loss_sums[b] = loss.ce * double(loss.counted);
    token_counts[b] = double(loss.counted);
  }
  if (world > 1) {
    ranks->all_reduce_sum(loss_sums.data(), int64_t(loss_sums.size()));
    ranks->all_reduce_sum(token_counts.data(), int64_t(token_counts.size()));
    sum_over_ranks(result.layer_metrics, *ranks);
  }
  double weighted_loss = 0;
  for (size_t b = 0; b < loss_sums.size(); ++b) {
    weighted_loss += loss_sums[b];
    result.tokens += int64_t(token_counts[b]);
  }
  result.loss = result.tokens ? weighted_loss / double(result.tokens) : 0.0;
  result.perplexity = std::exp(result.loss);
  return result;
}

std::vector<std::pair<std::string, double>> layer_metrics(const EvalResult& result, const std::string& domain) {
  std::vector<std::pair<std::string, double>> fields;
  for (const LayerMetricMeasures& m : result.layer_metrics) {
    const std::string prefix = m.kind + ".L" + std::to_string(m.layer) + ".";
    for (const auto& [name, value] : m.metric.metrics(m.measures))
      fields.emplace_back(prefix + name + "/" + domain, value);
  }
  return fields;
}

std::vector<std::string> layer_metric_lines(const EvalResult& result) {
  std::vector<std::string> lines;
  for (const LayerMetricMeasures& m : result.layer_metrics) lines.push_back(m.metric.console_line(m.layer, m.measures));
  return lines;
}

std::string format_eval(const EvalResult& e) {
  char line[128];
  std::snprintf(line, sizeof line, "loss %.4f | ppl %.2f | %lld tokens", e.loss, e.perplexity, (long long)e.tokens);
  return line;
}

void run_evaluation(const Recipe& recipe, const std::string& checkpoint, std::ostream& out, bool as_decoded) {
  FATHOM_CHECK(!recipe.data.validation.empty(), "the recipe has no data.validation domains to evaluate");
  const Device device = resolve_device(recipe.train.device);
  configure_threads(recipe.train.threads);
  const std::filesystem::path dir = resolve_checkpoint(checkpoint);
  // Evaluated as it was trained: bf16 weights and activations on a GPU under train.precision: bf16.
  const InferenceModel inference(recipe.model, load_checkpoint(dir, CheckpointUse::model_only).model,
                                 (dir / "model.safetensors").string(), device,
                                 uses_mixed_precision(recipe.train.precision, device));
  const Decoder& model = inference.decoder();

  const RunData data = open_run_data(recipe, DataUse::validation_only);
  out << "checkpoint " << dir.string() << "\n";
  for (const auto& [domain, source] : data.validation) {
    const EvalResult e =
        evaluate(model, source, recipe.train.batch_size, recipe.train.seq_len, recipe.eval.batches, device, as_decoded);
    char line[256];
    std::snprintf(line, sizeof line, "%-16s loss %.4f  ppl %.2f  (%lld tokens)", domain.c_str(), e.loss, e.perplexity,
                  (long long)e.tokens);
    out << line << "\n";
    for (const std::string& metric_line : layer_metric_lines(e)) out << metric_line << "\n";
  }
}

}  // namespace fathom
