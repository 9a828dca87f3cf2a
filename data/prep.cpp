#include "data/prep.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <future>
#include <span>
#include <thread>

#include "core/error.h"
#include "core/file_io.h"
#include "core/json.h"
#include "core/path_safety.h"
#include "core/progress_bar.h"
#include "core/sha256.h"
#include "core/thread_pool.h"
#include "data/shard.h"
#include "data/tokenizer.h"

namespace fathom {

namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxShardsPerSplit = 100000;  // shard_00000 .. shard_99999 sort in stream order

void check_domain_name(const std::string& name, const std::string& where) {
  FATHOM_CHECK(!name.empty(), where, ": the validation domain name is empty");
  const bool allowed =
      name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.+") == std::string::npos;
  FATHOM_CHECK(allowed && name.front() != '.', where, ": validation domain name '", name,
               "' may hold only letters, digits, '_', '-', '.', '+' and may not start with '.'");
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

// The input files of a split: each must be a readable regular file. Returns their total size.
uint64_t check_inputs(const PrepSplit& split) {
  FATHOM_CHECK(!split.files.empty(), "data prep: split '", split.name, "' has no input files");
  uint64_t bytes = 0;
  for (const std::string& file : split.files) {
    std::error_code error;
    const fs::file_status status = fs::status(file, error);
    FATHOM_CHECK(fs::exists(status), "data prep: input file '", file, "' of split '", split.name, "' does not exist");
    FATHOM_CHECK(fs::is_regular_file(status), "data prep: input '", file, "' of split '", split.name,
                 "' is not a regular file", fs::is_directory(status) ? " (it is a folder: list its files)" : "");
    bytes += ReadOnlyFile(file).size();  // opening it proves it is readable
  }
  return bytes;
}

// `out` as a folder path with a name (no trailing separator), refusing "", "." and "..".
fs::path output_path(const std::string& out) {
  FATHOM_CHECK(!out.empty(), "data prep: no output folder given (--out)");
  fs::path path = fs::path(out).lexically_normal();
  if (!path.has_filename()) path = path.parent_path();
  FATHOM_CHECK(!path.empty() && path.filename() != "." && path.filename() != "..", "data prep: output folder '", out,
               "' must name a folder");
  return path;
}

// Prep may replace nothing but an empty folder or an earlier prep output.
void check_replaceable(const fs::path& out) {
  std::error_code error;
  const fs::file_status status = fs::status(out, error);
  if (!fs::exists(status)) return;
  FATHOM_CHECK(fs::is_directory(status), "data prep: output '", out.string(), "' exists and is not a folder");
  FATHOM_CHECK(fs::is_empty(out, error) || fs::exists(out / kPrepManifestFile), "data prep: output folder '",
               out.string(), "' is not empty and holds no ", kPrepManifestFile,
               ", so data prep did not write it: refusing to replace it (choose another --out)");
}

// Removes the staging folder unless the prep finished.
class StagingFolder {
 public:
  explicit StagingFolder(const fs::path& out) {
    const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::path(".");
    std::error_code error;
    fs::create_directories(parent, error);
    FATHOM_CHECK(!error, "data prep: cannot create the output folder's parent '", parent.string(),
                 "': ", error.message());
    // Leftovers of earlier runs that died (their process is gone) are removed first.
    const std::string prefix = temp_name_for(out.filename().string());
    const std::string stem = prefix.substr(0, prefix.rfind('-') + 1);
    for (const auto& entry : fs::directory_iterator(parent, error)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind(stem, 0) == 0 && temp_entry_is_stale(name)) fs::remove_all(entry.path(), error);
    }
    path_ = parent / prefix;
    fs::remove_all(path_, error);
    FATHOM_CHECK(fs::create_directory(path_, error), "data prep: cannot write the output folder '", out.string(),
                 "': creating ", path_.string(), " failed: ", error ? error.message() : "it already exists");
  }
  ~StagingFolder() {
    std::error_code ignored;
    if (!path_.empty()) fs::remove_all(path_, ignored);
  }
  StagingFolder(const StagingFolder&) = delete;
  StagingFolder& operator=(const StagingFolder&) = delete;
  const fs::path& path() const { return path_; }
  void release() { path_.clear(); }

 private:
  fs::path path_;
};

// Tokens of one piece of text: EOS before every document (the split drops its very first one).
struct TokenizedPiece {
  std::vector<uint32_t> tokens;
  uint64_t documents = 0;
  uint64_t bytes = 0;
};

TokenizedPiece tokenize_piece(const std::string& text, DocumentSplit split, const Tokenizer& tokenizer) {
  TokenizedPiece piece;
  piece.bytes = text.size();
  piece.tokens.reserve(text.size() / 2 + 16);
  for_each_document_in(text, split, [&](std::string_view document) {
    piece.tokens.push_back(tokenizer.eos_id());
    const std::vector<uint32_t> ids = tokenizer.encode(document);
    piece.tokens.insert(piece.tokens.end(), ids.begin(), ids.end());
    ++piece.documents;
  });
  return piece;
}

// Cuts one split's token stream into shard files of exactly shard_tokens tokens (the last shorter).
class ShardCutter {
 public:
  ShardCutter(const fs::path& stage, PrepSplit& split, uint64_t shard_tokens, uint32_t vocab_size)
      : stage_(stage), split_(split), shard_tokens_(shard_tokens), vocab_size_(vocab_size) {
    std::error_code error;
    fs::create_directories(stage_ / split_.folder, error);
    FATHOM_CHECK(!error, "data prep: cannot create ", (stage_ / split_.folder).string(), ": ", error.message());
    buffer_.reserve(size_t(std::min<uint64_t>(shard_tokens_, uint64_t(1) << 24)));
  }

  void append(std::span<const uint32_t> tokens) {
    while (!tokens.empty()) {
      const size_t take = size_t(std::min<uint64_t>(tokens.size(), shard_tokens_ - buffer_.size()));
      buffer_.insert(buffer_.end(), tokens.begin(), tokens.begin() + ptrdiff_t(take));
      tokens = tokens.subspan(take);
      if (buffer_.size() == shard_tokens_) flush();
    }
  }

  void finish() {
    if (!buffer_.empty()) flush();
  }

 private:
  void flush() {
    const size_t index = split_.shards.size();
    FATHOM_CHECK(index < kMaxShardsPerSplit, "data prep: split '", split_.name, "' needs more than ",
                 kMaxShardsPerSplit, " shards of ", shard_tokens_, " tokens: raise --shard-tokens");
    char name[32];
    std::snprintf(name, sizeof name, "shard_%05zu.bin", index);
    const std::string relative = split_.folder + "/" + name;
    const fs::path path = stage_ / relative;
    write_shard(path.string(), buffer_, vocab_size_);
    split_.shards.push_back(PrepShard{relative, buffer_.size(), fs::file_size(path), sha256_file(path)});
    buffer_.clear();
  }

  fs::path stage_;
  PrepSplit& split_;
  uint64_t shard_tokens_;
  uint32_t vocab_size_;
  std::vector<uint32_t> buffer_;
};

// Tokenizes the files of one split on the pool, joining the pieces in order into shards.
void prepare_split(PrepSplit& split, const PrepOptions& options, const Tokenizer& tokenizer, ThreadPool& pool,
                   const fs::path& stage, ProgressBar* progress) {
  ShardCutter cutter(stage, split, options.shard_tokens, tokenizer.vocab_size());
  std::deque<std::future<TokenizedPiece>> in_flight;
  const size_t max_in_flight = 2 * size_t(pool.size()) + 1;  // bounds memory, keeps every worker busy
  auto join_oldest = [&] {
    const TokenizedPiece piece = in_flight.front().get();
    in_flight.pop_front();
    std::span<const uint32_t> tokens = piece.tokens;
    if (split.documents == 0 && piece.documents > 0) tokens = tokens.subspan(1);  // no EOS before the first document
    cutter.append(tokens);
    split.documents += piece.documents;
    split.tokens += tokens.size();
    if (progress) progress->advance(piece.bytes);
  };
  for (const std::string& file : split.files) {
    TextPieceReader reader(file, options.documents, options.piece_bytes);
    for (std::string text; reader.next(text);) {
      if (in_flight.size() >= max_in_flight) join_oldest();
      in_flight.push_back(pool.submit([text = std::move(text), &options, &tokenizer] {
        return tokenize_piece(text, options.documents, tokenizer);
      }));
    }
  }
  while (!in_flight.empty()) join_oldest();
  FATHOM_CHECK(split.documents > 0, "data prep: split '", split.name,
               "' has no documents: every file is empty or blank [", join(split.files), "]");
  cutter.finish();
}

void write_split_json(JsonWriter& json, const PrepSplit& split) {
  json.begin_object().key("folder").value(split.folder).key("files").begin_array();
  for (const std::string& file : split.files) json.value(file);
  json.end_array()
      .key("documents")
      .value(split.documents)
      .key("tokens")
      .value(split.tokens)
      .key("text_bytes")
      .value(split.text_bytes)
      .key("shards")
      .begin_array();
  for (const PrepShard& shard : split.shards) {
    json.begin_object()
        .key("file")
        .value(shard.file)
        .key("tokens")
        .value(shard.tokens)
        .key("bytes")
        .value(shard.bytes)
        .key("sha256")
        .value(shard.sha256)
        .end_object();
  }
  json.end_array().end_object();
}

}  // namespace

std::pair<std::string, std::vector<std::string>> parse_validation_spec(const std::string& spec) {
  const std::string where = "--validation '" + spec + "'";
  const size_t equals = spec.find('=');
  FATHOM_CHECK(equals != std::string::npos, where, ": expected NAME=FILE[,FILE...], e.g. moby_dick=data/moby_dick.txt");
  const std::string name = spec.substr(0, equals);
  check_domain_name(name, where);
  std::vector<std::string> files;
  const std::string list = spec.substr(equals + 1);
  FATHOM_CHECK(!list.empty(), where, ": no files after '='");
  for (size_t start = 0;;) {
    const size_t comma = list.find(',', start);
    files.push_back(list.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    FATHOM_CHECK(!files.back().empty(), where, ": empty file name in the comma-separated list");
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return {name, files};
}

std::string prep_manifest_json(const PrepResult& result, const PrepOptions& options) {
  JsonWriter json;
  json.begin_object()
      .key("format")
      .value("fathom data prep")
      .key("version")
      .value(1)
      .key("tokenizer")
      .begin_object()
      .key("spec")
      .value(options.tokenizer)
      .key("name")
      .value(result.tokenizer)
      .key("vocab_size")
      .value(result.vocab_size)
      .key("eos_id")
      .value(result.eos_id)
      .end_object()
      .key("documents")
      .value(options.documents == DocumentSplit::per_line ? "lines" : "files")
      .key("shard_tokens")
      .value(options.shard_tokens)
      .key("train");
  write_split_json(json, result.splits.front());
  json.key("validation").begin_object();
  for (size_t i = 1; i < result.splits.size(); ++i) {
    json.key(result.splits[i].name);
    write_split_json(json, result.splits[i]);
  }
  json.end_object().end_object();
  return json.str() + "\n";
}

PrepResult prepare_data(const PrepOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  // Everything that can be checked is checked before any work or any write.
  const fs::path out = output_path(options.out);
  FATHOM_CHECK(!options.train.empty(), "data prep: no training files given (--train)");
  FATHOM_CHECK(options.shard_tokens >= 1, "data prep: --shard-tokens must be at least 1, got ", options.shard_tokens);
  FATHOM_CHECK(options.threads >= 0 && options.threads <= kMaxThreads,
               "data prep: --threads must be >= 0 (0 = every core) and at most ", kMaxThreads, ", got ",
               options.threads);
  FATHOM_CHECK(options.piece_bytes >= 1, "data prep: piece size must be at least 1 byte");
  const std::unique_ptr<Tokenizer> tokenizer = make_tokenizer(options.tokenizer);

  PrepResult result;
  result.tokenizer = tokenizer->name();
  result.vocab_size = tokenizer->vocab_size();
  result.eos_id = tokenizer->eos_id();
  auto add_split = [&](const std::string& name, const std::string& folder, const std::vector<std::string>& files) {
    PrepSplit& split = result.splits.emplace_back();
    split.name = name;
    split.folder = folder;
    split.files = files;
  };
  add_split("train", "train", options.train);
  for (const auto& [domain, files] : options.validation) {
    check_domain_name(domain, "data prep");
    for (size_t i = 1; i < result.splits.size(); ++i)
      FATHOM_CHECK(result.splits[i].name != domain, "data prep: validation domain '", domain, "' is given twice");
    add_split(domain, "validation/" + domain, files);
  }
  uint64_t total_bytes = 0;
  for (PrepSplit& split : result.splits) total_bytes += split.text_bytes = check_inputs(split);
  check_replaceable(out);
  if (fs::exists(out)) {
    std::vector<fs::path> inputs;
    for (const PrepSplit& split : result.splits) inputs.insert(inputs.end(), split.files.begin(), split.files.end());
    check_safe_to_replace(out, inputs, "data prep --out");
  }

  StagingFolder stage(out);
  const int threads = options.threads > 0 ? options.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  ThreadPool pool(threads);
  std::unique_ptr<ProgressBar> progress;
  if (options.progress)
    progress = std::make_unique<ProgressBar>(*options.progress, "tokenizing", total_bytes, options.progress_in_place);
  for (PrepSplit& split : result.splits) prepare_split(split, options, *tokenizer, pool, stage.path(), progress.get());

  write_file_atomically(stage.path() / kPrepManifestFile, prep_manifest_json(result, options));
  for (const PrepSplit& split : result.splits) fsync_directory(stage.path() / split.folder);
  if (result.splits.size() > 1) fsync_directory(stage.path() / "validation");
  fsync_directory(stage.path());
  move_folder_into_place(stage.path(), out);
  stage.release();
  fsync_directory(out.has_parent_path() ? out.parent_path() : fs::path("."));
  if (progress) progress->finish();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace fathom
