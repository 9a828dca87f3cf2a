// Validation: mean next-token cross-entropy (no z-loss) and perplexity per named domain.
#pragma once
#include <iosfwd>
#include <memory>
#include <string>

#include "data/token_source.h"
#include "layers/decoder.h"

namespace fathom {

struct Recipe;

struct EvalResult {
  double loss = 0;        // mean CE per predicted token
  double perplexity = 0;  // exp(loss)
  int64_t tokens = 0;
};

// Runs up to max_batches batches of consecutive windows of `source` through the model, without
// recording a graph.
EvalResult evaluate(const Decoder& model, std::shared_ptr<const TokenSource> source, int64_t batch_size,
                    int64_t seq_len, int64_t max_batches, Device device);

// "loss 2.1234 | ppl 8.37 | 4096 tokens"
std::string format_eval(const EvalResult& result);

// `fathom eval`: loads a checkpoint's weights into the recipe's model and prints loss and
// perplexity for every validation domain of the recipe.
void run_evaluation(const Recipe& recipe, const std::string& checkpoint, std::ostream& out);

}  // namespace fathom
