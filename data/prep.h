// Data prep: tokenizes text files once, with every core, into token shards that training memory-maps
// (`fathom data prep`, train/cli/data_command.cpp).
//
// Output folder layout (each shard folder works directly as a recipe's data path):
//   <out>/train/shard_00000.bin ...               the training split
//   <out>/validation/<domain>/shard_00000.bin ...  one shard set per validation domain
//   <out>/manifest.json                            tokenizer, inputs, counts, shard sizes and SHA-256
// Each split is one token stream: the documents of its files in the order given, with the
// tokenizer's EOS between consecutive documents (not after the last), exactly what
// tokenize_text_files() gives; it is cut into shards of shard_tokens tokens (the last may be
// shorter). Pieces of text are tokenized in parallel but joined in order, so the output is
// byte-identical for any thread count. Tokenizer::encode() is called from several threads at once
// (it is const; a tokenizer must not mutate shared state in it).
//
// Writing is all-or-nothing: everything goes to a temporary sibling folder that replaces <out>
// only once complete. An existing <out> must be empty or an earlier data prep output (it has a
// manifest.json); anything else is refused. Inputs and options are checked before any work.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

#include "data/text.h"

namespace fathom {

inline constexpr uint64_t kDefaultShardTokens = uint64_t(1) << 27;  // 256 MiB of uint16 tokens
inline constexpr const char* kPrepManifestFile = "manifest.json";

struct PrepOptions {
  std::string tokenizer;  // a make_tokenizer() name or tokenizer file
  std::string out;        // the output folder
  DocumentSplit documents = DocumentSplit::per_line;
  std::vector<std::string> train;                                            // text files, >= 1
  std::vector<std::pair<std::string, std::vector<std::string>>> validation;  // domain -> text files
  int threads = 0;                                                           // tokenizing threads; 0 = every core
  uint64_t shard_tokens = kDefaultShardTokens;                               // tokens per shard file, >= 1
  size_t piece_bytes = size_t(1) << 20;  // text handed to one task (per_line); tests make it small
  std::ostream* progress = nullptr;      // progress display (stderr from the CLI); nullptr = silent
  bool progress_in_place = false;        // redraw one line (a terminal) rather than print lines
};

struct PrepShard {
  std::string file;  // relative to the output folder, e.g. "train/shard_00000.bin"
  uint64_t tokens = 0;
  uint64_t bytes = 0;  // file size, header included
  std::string sha256;  // of the whole file, lowercase hex
};

struct PrepSplit {
  std::string name;                // "train" or the validation domain
  std::string folder;              // relative to the output folder: "train" or "validation/<domain>"
  std::vector<std::string> files;  // the input text files, as given
  uint64_t documents = 0;
  uint64_t tokens = 0;      // EOS separators included
  uint64_t text_bytes = 0;  // bytes of the input files
  std::vector<PrepShard> shards;
};

struct PrepResult {
  std::string tokenizer;  // its name()
  uint32_t vocab_size = 0;
  uint32_t eos_id = 0;
  std::vector<PrepSplit> splits;  // train first, then the validation domains in the order given
  double seconds = 0;             // wall time of the whole prep
};

// Runs data prep; returns what manifest.json records. Every bad input (unknown tokenizer, missing
// or unreadable file, a split without documents, an unusable output folder, bad domain names, zero
// shard_tokens, negative threads) is an error naming it, and leaves the output folder untouched.
PrepResult prepare_data(const PrepOptions& options);

// The manifest.json text for a result (tokenizer, document split, shard size, and per split its
// files, counts and shards).
std::string prep_manifest_json(const PrepResult& result, const PrepOptions& options);

// Parses one `--validation` argument "NAME=FILE[,FILE...]". NAME becomes a folder and a metrics
// key: letters, digits, '_', '-', '.', '+', not starting with '.'.
std::pair<std::string, std::vector<std::string>> parse_validation_spec(const std::string& spec);

}  // namespace fathom
