#include "data/open_tokens.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "data/prep.h"

namespace fathom {

namespace fs = std::filesystem;

namespace {

std::vector<std::string> expand_folders(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const std::string& p : paths) {
    FATHOM_CHECK(fs::exists(p), "data path '", p, "' does not exist (paths are relative to the working folder)");
    if (!fs::is_directory(p)) {
      files.push_back(p);
      continue;
    }
    FATHOM_CHECK(!fs::exists(fs::path(p) / kPrepManifestFile), "data path '", p,
                 "' is a data prep output folder: name its shard folders instead, '", (fs::path(p) / "train").string(),
                 "' for data.train and '", (fs::path(p) / "validation" / "<domain>").string(),
                 "' for a validation domain");
    std::vector<std::string> inside;
    for (const auto& entry : fs::directory_iterator(p))
      if (entry.is_regular_file() && entry.path().filename().string().front() != '.')
        inside.push_back(entry.path().string());
    FATHOM_CHECK(!inside.empty(), "data folder '", p, "' holds no files");
    std::sort(inside.begin(), inside.end());
    files.insert(files.end(), inside.begin(), inside.end());
  }
  return files;
}

bool is_shard(const std::string& path) { return fs::path(path).extension() == ".bin"; }

}  // namespace

std::shared_ptr<const TokenSource> open_tokens(const std::vector<std::string>& paths, const Tokenizer& tokenizer,
                                               DocumentSplit split, int64_t model_vocab_size, ShardVerify verify) {
  const std::vector<std::string> files = expand_folders(paths);
  FATHOM_CHECK(!files.empty(), "no data files given");
  const size_t shards = size_t(std::count_if(files.begin(), files.end(), is_shard));
  FATHOM_CHECK(shards == 0 || shards == files.size(), "data files mix token shards (.bin) and text files: '",
               *std::find_if(files.begin(), files.end(), is_shard), "' and '",
               *std::find_if_not(files.begin(), files.end(), is_shard), "'");
  std::shared_ptr<const TokenSource> source;
  if (shards) {
    verify_shards(files, verify);
    source = std::make_shared<ShardTokenSource>(files);
    // Shards record their tokenizer's vocabulary size; a different one means another tokenizer.
    FATHOM_CHECK(source->vocab_size() == tokenizer.vocab_size(), source->describe(),
                 " were written for a vocabulary of ", source->vocab_size(), " ids, but tokenizer '", tokenizer.name(),
                 "' has ", tokenizer.vocab_size(),
                 ": prepare the data with the recipe's tokenizer (fathom data prep --tokenizer ...)");
  } else {
    source = std::make_shared<VectorTokenSource>(tokenize_text_files(files, split, tokenizer), tokenizer.vocab_size());
  }
  FATHOM_CHECK(int64_t(source->vocab_size()) <= model_vocab_size, source->describe(), " has token ids up to ",
               source->vocab_size() - 1, " but model.vocab_size is ", model_vocab_size);
  return source;
}

}  // namespace fathom
