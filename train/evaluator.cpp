#include "train/evaluator.h"

#include <cmath>
#include <cstdio>
#include <ostream>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "data/eval_iterator.h"
#include "train/checkpoint.h"
#include "train/device_select.h"
#include "train/inference_model.h"
#include "train/recipe.h"
#include "train/run_data.h"

namespace fathom {

EvalResult evaluate(const Decoder& model, std::shared_ptr<const TokenSource> source, int64_t batch_size,
                    int64_t seq_len, int64_t max_batches, Device device) {
  NoGrad no_grad;
  EvalIterator batches(std::move(source), batch_size, seq_len, max_batches);
  double weighted_loss = 0;
  EvalResult result;
  while (std::optional<TokenBatch> batch = batches.next()) {
    const int64_t rows = batch->inputs.dim(0) * batch->inputs.dim(1);
    const Variable logits = model.logits(batch->inputs.to(device));
    const LossParts loss = cross_entropy(reshape(logits, {rows, model.config().vocab_size}),
                                         batch->targets.to(device).view({rows}), 0.0);
    weighted_loss += loss.ce * double(loss.counted);
    result.tokens += loss.counted;
  }
  result.loss = result.tokens ? weighted_loss / double(result.tokens) : 0.0;
  result.perplexity = std::exp(result.loss);
  return result;
}

std::string format_eval(const EvalResult& e) {
  char line[128];
  std::snprintf(line, sizeof line, "loss %.4f | ppl %.2f | %lld tokens", e.loss, e.perplexity, (long long)e.tokens);
  return line;
}

void run_evaluation(const Recipe& recipe, const std::string& checkpoint, std::ostream& out) {
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
                                  device);
    char line[256];
    std::snprintf(line, sizeof line, "%-16s loss %.4f  ppl %.2f  (%lld tokens)", domain.c_str(), e.loss, e.perplexity,
                  (long long)e.tokens);
    out << line << "\n";
  }
}

}  // namespace fathom
