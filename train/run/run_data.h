// The data a run reads, opened once from its recipe: the tokenizer, the training tokens and the named
// validation domains. Training, evaluation and distillation open their data here.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/token_source.h"
#include "data/tokenizer.h"

namespace fathom {

struct Recipe;

using ValidationDomains = std::vector<std::pair<std::string, std::shared_ptr<const TokenSource>>>;

struct RunData {
  std::unique_ptr<Tokenizer> tokenizer;
  std::shared_ptr<const TokenSource> train;  // null when only validation was asked for
  ValidationDomains validation;              // in the recipe's order
};

enum class DataUse { training, validation_only };

// Checks that the tokenizer fits model.vocab_size and that every validation domain holds at least one
// sequence of train.seq_len + 1 tokens (so the last evaluation of a run cannot be the first to fail).
RunData open_run_data(const Recipe& recipe, DataUse use);

}  // namespace fathom
