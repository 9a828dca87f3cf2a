#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>

#include "data/prep.h"
#include "train/cli/commands.h"

namespace fathom {

namespace {

void print_summary(const PrepResult& result, const PrepOptions& options, std::ostream& out) {
  uint64_t bytes = 0;
  char line[256];
  for (const PrepSplit& split : result.splits) {
    bytes += split.text_bytes;
    std::snprintf(
        line, sizeof line, "%-24s %9llu documents %13llu tokens %5zu shards  (%s)", split.folder.c_str(),
        (unsigned long long)split.documents, (unsigned long long)split.tokens, split.shards.size(),
        split.shards.size() == 1 ? split.shards.front().file.c_str() : (split.folder + "/shard_*.bin").c_str());
    out << line << "\n";
  }
  std::snprintf(line, sizeof line, "%.1f MB of text in %.2f s (%.1f MB/s) with tokenizer %s (vocab %u)",
                double(bytes) / 1e6, result.seconds, double(bytes) / 1e6 / std::max(result.seconds, 1e-9),
                result.tokenizer.c_str(), result.vocab_size);
  out << line << "\nwrote " << options.out << "/" << kPrepManifestFile << "\n";
}

}  // namespace

void add_data_command(CLI::App& app) {
  struct Args {
    PrepOptions options;
    std::string documents = "lines";
    std::vector<std::string> validation;
  };
  auto args = std::make_shared<Args>();
  CLI::App* data = app.add_subcommand("data", "Prepare training data");
  data->require_subcommand(1);
  CLI::App* prep = data->add_subcommand(
      "prep", "Tokenize text files into token shards (one folder per split) with a manifest.json, using every core");
  prep->add_option("--tokenizer", args->options.tokenizer, "Tokenizer name (e.g. bytes) or file")->required();
  prep->add_option("--out", args->options.out, "Output folder (replaced as a whole when done)")->required();
  prep->add_option("--documents", args->documents, "How a file splits into documents: lines (one per line) or files")
      ->check(CLI::IsMember({"lines", "files"}))
      ->capture_default_str();
  prep->add_option("--train", args->options.train, "Training text files")->required()->expected(1, -1);
  prep->add_option("--validation", args->validation,
                   "Validation domains, each NAME=FILE[,FILE...], e.g. moby_dick=data/moby_dick.txt")
      ->expected(1, -1);
  add_threads_option(prep, args->options.threads, "Tokenizing threads");
  prep->add_option("--shard-tokens", args->options.shard_tokens, "Tokens per shard file")
      ->default_val(kDefaultShardTokens);
  prep->callback([args] {
    PrepOptions& options = args->options;
    options.documents = parse_document_split(args->documents);
    for (const std::string& spec : args->validation) options.validation.push_back(parse_validation_spec(spec));
    options.progress = &std::cerr;
    options.progress_in_place = ::isatty(STDERR_FILENO) != 0;
    print_summary(prepare_data(options), options, std::cout);
  });
}

}  // namespace fathom
