// Turns a recipe's list of data paths into one token stream. Paths ending in ".bin" are token
// shards; any other file is text, tokenized on load; a folder stands for every file in it, sorted
// by name. Shards and text cannot be mixed in one list. Shards must have been written for the
// tokenizer's vocabulary (as `fathom data prep` does); a data prep output folder itself is refused
// with a pointer to its train/ and validation/<domain>/ shard folders. Shards are checked against
// their data prep manifest as `verify` says (data/manifest_verify.h).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "data/manifest_verify.h"
#include "data/text.h"
#include "data/token_source.h"

namespace fathom {

std::shared_ptr<const TokenSource> open_tokens(const std::vector<std::string>& paths, const Tokenizer& tokenizer,
                                               DocumentSplit split, int64_t model_vocab_size,
                                               ShardVerify verify = ShardVerify::automatic);

}  // namespace fathom
