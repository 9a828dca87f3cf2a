// Validation: mean next-token cross-entropy (no z-loss) and perplexity per named domain.
#pragma once
#include <iosfwd>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/token_source.h"
#include "layers/decoder.h"
#include "layers/layer_kinds.h"

namespace fathom {

class Communicator;
struct Recipe;

// The summed measures behind one kind metric of one layer.
struct LayerMetricMeasures {
  int64_t layer = 0;
  std::string kind;  // its name: the metrics' prefix
  KindMetric metric;
  LayerMeasures measures;
};

struct EvalResult {
  double loss = 0;        // mean CE per predicted token
  double perplexity = 0;  // exp(loss)
  int64_t tokens = 0;
  // Per layer and kind metric (layers/layer_kinds.h: MoD's routing agreement), the layer's measures
  // summed over the evaluated batches and every rank.
  std::vector<LayerMetricMeasures> layer_metrics;
};

// Runs up to max_batches batches of consecutive windows of `source` through the model, without
// recording a graph. With `ranks` (data parallel: every rank holds the same weights and calls this
// together), rank r evaluates batches r, r + world, ... and every rank returns the whole result, equal
// bit for bit to one process evaluating every batch. as_decoded: layers decide as decoding does
// (ForwardOptions::as_decoded: MoD routes each token by its causal router instead of each sequence's
// top-k), so the loss is the one generation sees.
EvalResult evaluate(const Decoder& model, std::shared_ptr<const TokenSource> source, int64_t batch_size,
                    int64_t seq_len, int64_t max_batches, Device device, bool as_decoded = false,
                    Communicator* ranks = nullptr);

// The kind metrics of an evaluation of `domain` for metrics.jsonl: <kind>.L<layer>.<name>/<domain>, e.g.
// mod.L1.accuracy/moby for MoD's routed layer 1.
std::vector<std::pair<std::string, double>> layer_metrics(const EvalResult& result, const std::string& domain);
// The same as console lines, one per layer and metric.
std::vector<std::string> layer_metric_lines(const EvalResult& result);

// "loss 2.1234 | ppl 8.37 | 4096 tokens"
std::string format_eval(const EvalResult& result);

// `fathom eval`: loads a checkpoint's weights into the recipe's model and prints loss and
// perplexity for every validation domain of the recipe.
// It also prints each layer kind's metrics (MoD's routing agreement); `as_decoded` as evaluate() takes it.
void run_evaluation(const Recipe& recipe, const std::string& checkpoint, std::ostream& out, bool as_decoded = false);

}  // namespace fathom
