#include "train/run/run_data.h"

#include "core/error.h"
#include "data/open_tokens.h"
#include "train/recipe/recipe.h"

namespace fathom {

namespace {

std::string join_paths(const std::vector<std::string>& paths) {
  std::string out;
  for (const std::string& p : paths) out += (out.empty() ? "'" : ", '") + p + "'";
  return out;
}

}  // namespace

RunData open_run_data(const Recipe& r, DataUse use) {
  RunData d;
  d.tokenizer = make_tokenizer(r.data.tokenizer);
  FATHOM_CHECK(int64_t(d.tokenizer->vocab_size()) <= r.model.vocab_size, "tokenizer '", r.data.tokenizer, "' has ",
               d.tokenizer->vocab_size(), " token ids but model.vocab_size is ", r.model.vocab_size,
               "; raise model.vocab_size to at least ", d.tokenizer->vocab_size());
  const DocumentSplit split = parse_document_split(r.data.documents);
  const ShardVerify verify = parse_shard_verify(r.data.verify);
  if (use == DataUse::training) d.train = open_tokens(r.data.train, *d.tokenizer, split, r.model.vocab_size, verify);
  for (const auto& [domain, paths] : r.data.validation) {
    auto source = open_tokens(paths, *d.tokenizer, split, r.model.vocab_size, verify);
    FATHOM_CHECK(source->size() >= size_t(r.train.seq_len) + 1, "validation domain '", domain, "' (", join_paths(paths),
                 ") has ", source->size(), " tokens, too few for one sequence of train.seq_len ", r.train.seq_len,
                 " (needs ", r.train.seq_len + 1, "); give it more text or drop the domain");
    d.validation.emplace_back(domain, std::move(source));
  }
  return d;
}

}  // namespace fathom
