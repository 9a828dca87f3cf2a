// Tokenizer encode/decode throughput on one core over the shipped quickstart corpus
// (data/corpus/quickstart: ~1 MB of State of the Union addresses + ~100 KB of Moby Dick).
// Prints MB/s (10^6 bytes of text per second) per tokenizer:
//   cold    first pass in a fresh thread (its piece cache starts empty)
//   warm    median of later passes (the cache holds the corpus's common pieces)
//   decode  ids back to text
// Usage: bench_tokenizer [reps] [tokenizer ...]   (default: cl100k gpt2 dolma2 cl100k_hf and,
// when present, data/tokenizers/quickstart-4k.json)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "core/file_io.h"
#include "data/text.h"
#include "data/tokenizer.h"

using namespace fathom;

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// The corpus as documents, the way training reads it: one per line for the addresses, the whole
// file for Moby Dick.
std::vector<std::string> load_corpus(size_t& bytes) {
  const std::filesystem::path root = std::filesystem::path(FATHOM_SOURCE_DIR) / "data" / "corpus" / "quickstart";
  std::vector<std::string> docs;
  std::vector<std::filesystem::path> train;
  for (const auto& entry : std::filesystem::directory_iterator(root / "train")) train.push_back(entry.path());
  std::sort(train.begin(), train.end());
  for (const auto& path : train)
    for (std::string& d : read_documents(path.string(), DocumentSplit::per_line)) docs.push_back(std::move(d));
  docs.push_back(read_file(root / "validation" / "moby_dick.txt"));
  bytes = 0;
  for (const std::string& d : docs) bytes += d.size();
  return docs;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  std::vector<std::string> names;
  for (int i = 2; i < argc; ++i) names.push_back(argv[i]);
  if (names.empty()) {
    const std::string tokenizers = std::string(FATHOM_SOURCE_DIR) + "/data/tokenizers/";
    names = {"cl100k", "gpt2", "dolma2", tokenizers + "cl100k_hf/tokenizer.json"};
    if (std::filesystem::exists(tokenizers + "quickstart-4k.json")) names.push_back(tokenizers + "quickstart-4k.json");
  }
  size_t bytes = 0;
  const std::vector<std::string> docs = load_corpus(bytes);
  std::printf("corpus: %zu documents, %.2f MB; one thread; %d warm reps\n\n", docs.size(), bytes / 1e6, reps);
  std::printf("%-28s %8s %9s %9s %9s %9s %10s\n", "tokenizer", "load s", "tokens", "bytes/tok", "cold MB/s",
              "warm MB/s", "decode MB/s");
  for (const std::string& name : names) {
    const double t_load = now_s();
    const std::unique_ptr<Tokenizer> tok = make_tokenizer(name);
    const double load_s = now_s() - t_load;
    std::vector<std::vector<uint32_t>> ids(docs.size());
    const auto encode_all = [&] {
      for (size_t i = 0; i < docs.size(); ++i) ids[i] = tok->encode(docs[i]);
    };
    // A fresh thread has an empty piece cache, so this pass pays for every first merge.
    double cold_s = 0;
    std::thread([&] {
      const double t0 = now_s();
      encode_all();
      cold_s = now_s() - t0;
    }).join();
    std::vector<double> warm;
    for (int r = 0; r < reps; ++r) {
      const double t0 = now_s();
      encode_all();
      warm.push_back(now_s() - t0);
    }
    std::sort(warm.begin(), warm.end());
    size_t tokens = 0;
    for (const auto& v : ids) tokens += v.size();
    const double t0 = now_s();
    size_t decoded = 0;
    for (const auto& v : ids) decoded += tok->decode(v).size();
    const double decode_s = now_s() - t0;
    if (decoded != bytes) {
      std::fprintf(stderr, "%s: decode gave %zu bytes, expected %zu\n", name.c_str(), decoded, bytes);
      return 1;
    }
    const std::string shown = name.size() > 28 ? "..." + name.substr(name.size() - 25) : name;
    std::printf("%-28s %8.2f %9zu %9.2f %9.1f %9.1f %10.1f\n", shown.c_str(), load_s, tokens, double(bytes) / tokens,
                bytes / cold_s / 1e6, bytes / warm[warm.size() / 2] / 1e6, bytes / decode_s / 1e6);
  }
  return 0;
}
