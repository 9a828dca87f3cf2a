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

EvalRouting parse_eval_routing(const std::string& name) {
  return EvalRouting(choice_index(name, {"topk", "causal"}, "--routing"));
}

namespace {

// RoutingCounts' six integer fields as doubles (exact below 2^53), for a sum over ranks.
constexpr int kRoutingFields = 6;
void to_doubles(const RoutingCounts& c, double* out) {
  const int64_t fields[kRoutingFields] = {c.tokens, c.topk, c.causal, c.causal_and_topk, c.router, c.router_and_topk};
  for (int i = 0; i < kRoutingFields; ++i) out[i] = double(fields[i]);
}
RoutingCounts from_doubles(const double* in) {
  return {int64_t(in[0]), int64_t(in[1]), int64_t(in[2]), int64_t(in[3]), int64_t(in[4]), int64_t(in[5])};
}

// Sums every rank's counts (each rank counted only its own batches).
void sum_over_ranks(std::vector<RoutingCounts>& counts, Communicator& comm) {
  std::vector<double> values(counts.size() * kRoutingFields);
  for (size_t l = 0; l < counts.size(); ++l) to_doubles(counts[l], &values[l * kRoutingFields]);
  comm.all_reduce_sum(values.data(), int64_t(values.size()));
  for (size_t l = 0; l < counts.size(); ++l) counts[l] = from_doubles(&values[l * kRoutingFields]);
}

}  // namespace

EvalResult evaluate(const Decoder& model, std::shared_ptr<const TokenSource> source, int64_t batch_size,
                    int64_t seq_len, int64_t max_batches, Device device, EvalRouting routing, Communicator* ranks) {
  NoGrad no_grad;
  EvalIterator batches(std::move(source), batch_size, seq_len, max_batches);
  const int rank = ranks ? ranks->rank() : 0;
  const int world = ranks ? ranks->world() : 1;
  // Per batch: its summed token losses and its token count. A rank fills only its own batches
  // (b % world == rank), so after the sum over ranks every slot holds one rank's value exactly, and
  // the total adds the batches in order: the same figure as one process evaluating them all.
  std::vector<double> loss_sums(size_t(batches.num_batches()), 0.0);
  std::vector<double> token_counts(loss_sums.size(), 0.0);
  const bool mod = model.config().mod.enabled();
  ForwardOptions options;
  options.causal_routing = routing == EvalRouting::causal;
  options.routing_counts = mod;
  std::vector<RoutingCounts> counts(model.blocks().size());
  for (size_t b = 0; b < loss_sums.size(); ++b) {
    if (int(b % size_t(world)) != rank) {
      batches.skip();
      continue;
    }
    const std::optional<TokenBatch> batch = batches.next();
    const int64_t rows = batch->inputs.dim(0) * batch->inputs.dim(1);
    const ModelOutput output = model.forward(batch->inputs.to(device), options);
    for (size_t l = 0; l < output.routing_counts.size(); ++l)
      if (output.routing_counts[l]) counts[l] += *output.routing_counts[l];
    const Variable logits = linear(output.hidden, model.head_weight());
    const LossParts loss = cross_entropy(reshape(logits, {rows, model.config().vocab_size}),
                                         batch->targets.to(device).view({rows}), 0.0);
    loss_sums[b] = loss.ce * double(loss.counted);
    token_counts[b] = double(loss.counted);
  }
  if (world > 1) {
    ranks->all_reduce_sum(loss_sums.data(), int64_t(loss_sums.size()));
    ranks->all_reduce_sum(token_counts.data(), int64_t(token_counts.size()));
    if (mod) sum_over_ranks(counts, *ranks);
  }
  EvalResult result;
  double weighted_loss = 0;
  for (size_t b = 0; b < loss_sums.size(); ++b) {
    weighted_loss += loss_sums[b];
    result.tokens += int64_t(token_counts[b]);
  }
  result.loss = result.tokens ? weighted_loss / double(result.tokens) : 0.0;
  result.perplexity = std::exp(result.loss);
  for (size_t l = 0; l < counts.size(); ++l)
    if (model.config().mod.routes(int64_t(l))) result.routing.emplace_back(int64_t(l), counts[l]);
  return result;
}

std::vector<std::pair<std::string, double>> routing_metrics(const EvalResult& result, const std::string& domain) {
  std::vector<std::pair<std::string, double>> fields;
  for (const auto& [layer, c] : result.routing) {
    const std::string prefix = "mod.L" + std::to_string(layer) + ".";
    const std::pair<const char*, double> values[] = {
        {"accuracy", c.accuracy()},          {"precision", c.precision()},
        {"recall", c.recall()},              {"router_agreement", c.router_agreement()},
        {"routed_fraction", c.causal_fraction()}, {"topk_fraction", c.topk_fraction()}};
    for (const auto& [name, value] : values) fields.emplace_back(prefix + name + "/" + domain, value);
  }
  return fields;
}

std::vector<std::string> routing_report(const EvalResult& result) {
  std::vector<std::string> lines;
  for (const auto& [layer, c] : result.routing) {
    char line[256];
    std::snprintf(line, sizeof line,
                  "  mod L%lld | causal routes %.1f%% (top-k %.1f%%) | accuracy %.4f | precision %.4f | recall %.4f | "
                  "router agreement %.4f",
                  (long long)layer, 100 * c.causal_fraction(), 100 * c.topk_fraction(), c.accuracy(), c.precision(),
                  c.recall(), c.router_agreement());
    lines.emplace_back(line);
  }
  return lines;
}

std::string format_eval(const EvalResult& e) {
  char line[128];
  std::snprintf(line, sizeof line, "loss %.4f | ppl %.2f | %lld tokens", e.loss, e.perplexity, (long long)e.tokens);
  return line;
}

void run_evaluation(const Recipe& recipe, const std::string& checkpoint, std::ostream& out, EvalRouting routing) {
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
    const EvalResult e = evaluate(model, source, recipe.train.batch_size, recipe.train.seq_len, recipe.eval.batches,
                                  device, routing);
    char line[256];
    std::snprintf(line, sizeof line, "%-16s loss %.4f  ppl %.2f  (%lld tokens)", domain.c_str(), e.loss, e.perplexity,
                  (long long)e.tokens);
    out << line << "\n";
    for (const std::string& routing_line : routing_report(e)) out << routing_line << "\n";
  }
}

}  // namespace fathom
