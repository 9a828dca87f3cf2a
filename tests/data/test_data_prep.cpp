// Data prep: the shards hold exactly the token stream the text loader builds, for any thread
// count and piece size; shards split at exact boundaries; the manifest records what was written;
// every bad input is a clear error that leaves no partial output and keeps an earlier output.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>
#include <sstream>

#include "core/json.h"
#include "core/sha256.h"
#include "data/open_tokens.h"
#include "data/prep.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "tests/support/data_test_helpers.h"

using namespace fathom;
using fathom::testing::error_of;
using fathom::testing::read_bytes;
using fathom::testing::ScratchFolder;
using fathom::testing::write_bytes;
namespace fs = std::filesystem;

namespace {

constexpr uint32_t kEos = 256;  // the byte tokenizer's

// Random lines of words (ASCII and some UTF-8), with blank and whitespace-only lines and CRLF
// endings mixed in, so the document rules are exercised too.
std::string random_text(std::mt19937& rng, int lines) {
  static const char* kPieces[] = {"the", "whale", "Union", "ship", "é", "—", "42", ",", ".", "state", "of", "ﬁ"};
  std::string text;
  for (int i = 0; i < lines; ++i) {
    const int kind = int(rng() % 10);
    if (kind == 0) {
      text += "\n";
    } else if (kind == 1) {
      text += " \t \n";
    } else {
      const int words = 1 + int(rng() % 60);
      for (int w = 0; w < words; ++w) text += std::string(w ? " " : "") + kPieces[rng() % std::size(kPieces)];
      text += kind == 2 ? "\r\n" : "\n";
    }
  }
  if (rng() % 2) text += "last line without a line end";
  return text;
}

std::vector<std::string> write_random_files(const ScratchFolder& dir, const std::string& stem, int count,
                                            std::mt19937& rng) {
  std::vector<std::string> paths;
  for (int i = 0; i < count; ++i) {
    paths.push_back(dir.file(stem + std::to_string(i) + ".txt"));
    write_bytes(paths.back(), random_text(rng, 20 + int(rng() % 80)));
  }
  return paths;
}

// Every token of a shard folder, shards in name order.
std::vector<uint32_t> folder_tokens(const fs::path& folder) {
  std::vector<std::string> shards;
  for (const auto& entry : fs::directory_iterator(folder)) shards.push_back(entry.path().string());
  std::sort(shards.begin(), shards.end());
  std::vector<uint32_t> tokens;
  for (const std::string& path : shards) {
    const TokenShard shard = open_shard(path);
    const size_t start = tokens.size();
    tokens.resize(start + shard.size());
    shard.read(0, std::span<uint32_t>(tokens).subspan(start));
  }
  return tokens;
}

// Relative path -> contents of every file under `root`.
std::map<std::string, std::string> tree(const fs::path& root) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(root))
    if (entry.is_regular_file()) files[fs::relative(entry.path(), root).string()] = read_bytes(entry.path().string());
  return files;
}

// No output folder and no temporary leftovers next to where it would be.
void expect_no_output(const fs::path& out) {
  EXPECT_FALSE(fs::exists(out)) << out;
  for (const auto& entry : fs::directory_iterator(out.parent_path()))
    EXPECT_NE(entry.path().filename().string().rfind(".tmp-", 0), 0u) << "leftover " << entry.path();
}

PrepOptions options_for(const fs::path& out, std::vector<std::string> train) {
  PrepOptions o;
  o.tokenizer = "bytes";
  o.out = out.string();
  o.train = std::move(train);
  o.threads = 2;
  return o;
}

std::vector<uint32_t> byte_tokens(std::string_view text) { return std::vector<uint32_t>(text.begin(), text.end()); }

}  // namespace

TEST(DataPrep, ShardsHoldTheSameStreamAsTheTextLoader) {
  std::mt19937 rng(101);
  ScratchFolder dir;
  const auto train = write_random_files(dir, "train", 3, rng);
  const auto moby = write_random_files(dir, "moby", 2, rng);
  const auto sotu = write_random_files(dir, "sotu", 1, rng);
  const std::unique_ptr<Tokenizer> bytes = make_tokenizer("bytes");
  for (const DocumentSplit split : {DocumentSplit::per_line, DocumentSplit::whole_file}) {
    PrepOptions o = options_for(dir.path() / "out", train);
    o.validation = {{"moby", moby}, {"sotu_recent", sotu}};
    o.documents = split;
    o.shard_tokens = 700 + rng() % 300;
    o.piece_bytes = 97;
    const PrepResult r = prepare_data(o);
    EXPECT_EQ(folder_tokens(dir.path() / "out" / "train"), tokenize_text_files(train, split, *bytes));
    EXPECT_EQ(folder_tokens(dir.path() / "out" / "validation" / "moby"), tokenize_text_files(moby, split, *bytes));
    EXPECT_EQ(folder_tokens(dir.path() / "out" / "validation" / "sotu_recent"),
              tokenize_text_files(sotu, split, *bytes));
    ASSERT_EQ(r.splits.size(), 3u);
    EXPECT_EQ(r.splits[0].tokens, tokenize_text_files(train, split, *bytes).size());
    size_t documents = 0;
    for (const std::string& f : moby) documents += read_documents(f, split).size();
    EXPECT_EQ(r.splits[1].documents, documents);
  }
}

TEST(DataPrep, OutputIsByteIdenticalForOneAndThreeThreads) {
  std::mt19937 rng(202);
  ScratchFolder dir;
  const auto train = write_random_files(dir, "train", 4, rng);
  const auto valid = write_random_files(dir, "valid", 2, rng);
  std::map<std::string, std::string> outputs[2];
  for (int i = 0; i < 2; ++i) {
    PrepOptions o = options_for(dir.path() / ("out" + std::to_string(i)), train);
    o.validation = {{"held_out", valid}};
    o.threads = i == 0 ? 1 : 3;
    o.shard_tokens = 1500;
    o.piece_bytes = 61;  // many small pieces, so the three threads interleave
    prepare_data(o);
    outputs[i] = tree(dir.path() / ("out" + std::to_string(i)));
  }
  EXPECT_GT(outputs[0].size(), 4u);  // several shards, not one
  EXPECT_EQ(outputs[0], outputs[1]);
}

TEST(DataPrep, EosGoesBetweenDocumentsAcrossFilesButNotAtTheEnds) {
  ScratchFolder dir;
  write_bytes(dir.file("a.txt"), "\n  \nab\r\ncd\n\n");
  write_bytes(dir.file("blank.txt"), " \n\t\n");
  write_bytes(dir.file("b.txt"), "ef");
  PrepOptions o = options_for(dir.path() / "out", {dir.file("a.txt"), dir.file("blank.txt"), dir.file("b.txt")});
  const PrepResult r = prepare_data(o);
  EXPECT_EQ(folder_tokens(dir.path() / "out" / "train"),
            (std::vector<uint32_t>{'a', 'b', kEos, 'c', 'd', kEos, 'e', 'f'}));
  EXPECT_EQ(r.splits[0].documents, 3u);
  EXPECT_EQ(r.splits[0].tokens, 8u);

  o.documents = DocumentSplit::whole_file;
  prepare_data(o);  // replaces the earlier output
  std::vector<uint32_t> expected = byte_tokens("\n  \nab\r\ncd\n\n");
  expected.push_back(kEos);
  for (uint32_t t : byte_tokens("ef")) expected.push_back(t);
  EXPECT_EQ(folder_tokens(dir.path() / "out" / "train"), expected);
}

TEST(DataPrep, ShardsSplitAtExactBoundaries) {
  ScratchFolder dir;
  std::mt19937 rng(303);
  std::string text(30, 'x');
  for (char& c : text) c = char('a' + rng() % 26);
  write_bytes(dir.file("30.txt"), text);
  write_bytes(dir.file("31.txt"), text + "z");
  struct Case {
    const char* file;
    uint64_t shard_tokens;
    std::vector<uint64_t> sizes;
  };
  const Case cases[] = {{"30.txt", 10, {10, 10, 10}},  // an exact multiple: no empty last shard
                        {"31.txt", 10, {10, 10, 10, 1}},
                        {"30.txt", 1, std::vector<uint64_t>(30, 1)},
                        {"30.txt", 30, {30}},
                        {"30.txt", 1000, {30}}};
  for (const Case& c : cases) {
    PrepOptions o = options_for(dir.path() / "out", {dir.file(c.file)});
    o.shard_tokens = c.shard_tokens;
    const PrepResult r = prepare_data(o);
    std::vector<uint64_t> sizes;
    for (const PrepShard& s : r.splits[0].shards) sizes.push_back(s.tokens);
    EXPECT_EQ(sizes, c.sizes) << c.file << " in shards of " << c.shard_tokens;
    // On disk: exactly these shards (the previous output's extra shards are gone), in order.
    size_t on_disk = 0;
    for (const auto& e : fs::directory_iterator(dir.path() / "out" / "train")) on_disk += e.is_regular_file();
    EXPECT_EQ(on_disk, c.sizes.size());
    EXPECT_EQ(folder_tokens(dir.path() / "out" / "train"), byte_tokens(read_bytes(dir.file(c.file))));
  }
}

TEST(DataPrep, ManifestRecordsTokenizerSplitsAndShardChecksums) {
  std::mt19937 rng(404);
  ScratchFolder dir;
  const auto train = write_random_files(dir, "train", 2, rng);
  const auto valid = write_random_files(dir, "valid", 1, rng);
  PrepOptions o = options_for(dir.path() / "prepared", train);
  o.validation = {{"moby_dick", valid}};
  o.shard_tokens = 2000;
  const PrepResult r = prepare_data(o);
  const fs::path out = dir.path() / "prepared";
  const std::string text = read_bytes((out / kPrepManifestFile).string());
  EXPECT_EQ(text, prep_manifest_json(r, o));
  const YAML::Node m = parse_json(text, "manifest.json");
  EXPECT_EQ(m["format"].as<std::string>(), "fathom data prep");
  EXPECT_EQ(m["tokenizer"]["spec"].as<std::string>(), "bytes");
  EXPECT_EQ(m["tokenizer"]["name"].as<std::string>(), make_tokenizer("bytes")->name());
  EXPECT_EQ(m["tokenizer"]["vocab_size"].as<uint32_t>(), 257u);
  EXPECT_EQ(m["tokenizer"]["eos_id"].as<uint32_t>(), kEos);
  EXPECT_EQ(m["documents"].as<std::string>(), "lines");
  EXPECT_EQ(m["shard_tokens"].as<uint64_t>(), 2000u);
  const std::pair<YAML::Node, const PrepSplit*> splits[] = {{m["train"], &r.splits[0]},
                                                            {m["validation"]["moby_dick"], &r.splits[1]}};
  for (const auto& [node, split] : splits) {
    EXPECT_EQ(node["folder"].as<std::string>(), split->folder);
    EXPECT_EQ(node["files"].as<std::vector<std::string>>(), split->files);
    EXPECT_EQ(node["documents"].as<uint64_t>(), split->documents);
    EXPECT_EQ(node["tokens"].as<uint64_t>(), split->tokens);
    uint64_t text_bytes = 0, shard_tokens = 0;
    for (const std::string& f : split->files) text_bytes += fs::file_size(f);
    EXPECT_EQ(node["text_bytes"].as<uint64_t>(), text_bytes);
    ASSERT_EQ(node["shards"].size(), split->shards.size());
    for (const YAML::Node& shard : node["shards"]) {
      const fs::path file = out / shard["file"].as<std::string>();
      EXPECT_EQ(shard["bytes"].as<uint64_t>(), fs::file_size(file));
      EXPECT_EQ(shard["sha256"].as<std::string>(), sha256_file(file));
      EXPECT_EQ(shard["tokens"].as<uint64_t>(), open_shard(file.string()).size());
      shard_tokens += shard["tokens"].as<uint64_t>();
    }
    EXPECT_EQ(shard_tokens, split->tokens);
  }
  EXPECT_EQ(r.splits[0].shards.front().file, "train/shard_00000.bin");
  EXPECT_EQ(r.splits[1].shards.front().file, "validation/moby_dick/shard_00000.bin");
}

TEST(DataPrep, BadInputsAreClearErrorsAndWriteNothing) {
  std::mt19937 rng(505);
  ScratchFolder dir;
  const auto train = write_random_files(dir, "train", 1, rng);
  write_bytes(dir.file("blank.txt"), "\n \t\n\r\n");
  fs::create_directory(dir.path() / "a_folder");
  const fs::path out = dir.path() / "out";
  struct Case {
    std::function<void(PrepOptions&)> change;
    std::string message;
  };
  const Case cases[] = {
      {[&](PrepOptions& o) {
         o.validation = {{"moby", {dir.file("missing.txt")}}};
       },
       "input file '" + dir.file("missing.txt") + "' of split 'moby' does not exist"},
      {[&](PrepOptions& o) { o.train.push_back((dir.path() / "a_folder").string()); },
       "is not a regular file (it is a folder"},
      {[&](PrepOptions& o) { o.tokenizer = "no_such_tokenizer"; }, "unknown tokenizer 'no_such_tokenizer'"},
      {[&](PrepOptions& o) { o.train = {dir.file("blank.txt")}; }, "split 'train' has no documents"},
      {[&](PrepOptions& o) {
         o.validation = {{"empty", {dir.file("blank.txt")}}};
       },
       "split 'empty' has no documents"},
      {[&](PrepOptions& o) { o.train.clear(); }, "no training files given"},
      {[&](PrepOptions& o) { o.out.clear(); }, "no output folder given"},
      {[&](PrepOptions& o) { o.shard_tokens = 0; }, "--shard-tokens must be at least 1"},
      {[&](PrepOptions& o) { o.threads = -1; }, "--threads must be >= 0"},
      {[&](PrepOptions& o) { o.threads = 100000; }, "--threads must be >= 0 (0 = every core) and at most 1024"},
      {[&](PrepOptions& o) {
         o.validation = {{"a", train}, {"a", train}};
       },
       "validation domain 'a' is given twice"},
      {[&](PrepOptions& o) {
         o.validation = {{"../escape", train}};
       },
       "validation domain name '../escape' may hold only"},
  };
  for (const Case& c : cases) {
    PrepOptions o = options_for(out, train);
    c.change(o);
    const std::string message = error_of([&] { prepare_data(o); });
    EXPECT_NE(message.find(c.message), std::string::npos) << message;
    expect_no_output(out);
  }
}

TEST(DataPrep, UnwritableOrForeignOutputFoldersAreRefused) {
  std::mt19937 rng(606);
  ScratchFolder dir;
  const auto train = write_random_files(dir, "train", 1, rng);
  write_bytes(dir.file("a_file"), "not a folder");
  // Under a regular file no folder can be made (this holds for root too, unlike permissions).
  std::string message = error_of([&] { prepare_data(options_for(dir.path() / "a_file" / "out", train)); });
  EXPECT_NE(message.find("cannot create the output folder's parent"), std::string::npos) << message;
  message = error_of([&] { prepare_data(options_for(dir.path() / "a_file", train)); });
  EXPECT_NE(message.find("exists and is not a folder"), std::string::npos) << message;
  EXPECT_EQ(read_bytes(dir.file("a_file")), "not a folder");
  // A folder data prep did not write is never replaced.
  fs::create_directory(dir.path() / "mine");
  write_bytes(dir.file("mine/notes.txt"), "keep me");
  message = error_of([&] { prepare_data(options_for(dir.path() / "mine", train)); });
  EXPECT_NE(message.find("refusing to replace it"), std::string::npos) << message;
  EXPECT_EQ(read_bytes(dir.file("mine/notes.txt")), "keep me");
  // An empty folder is fine, and a trailing separator names the same folder.
  fs::create_directory(dir.path() / "empty");
  prepare_data(options_for((dir.path() / "empty").string() + "/", train));
  EXPECT_TRUE(fs::exists(dir.path() / "empty" / kPrepManifestFile));
}

TEST(DataPrep, AFailedRunKeepsTheEarlierOutput) {
  std::mt19937 rng(707);
  ScratchFolder dir;
  const auto train = write_random_files(dir, "train", 2, rng);
  write_bytes(dir.file("blank.txt"), "\n\n");
  const fs::path out = dir.path() / "out";
  PrepOptions o = options_for(out, train);
  o.shard_tokens = 500;
  prepare_data(o);
  const auto before = tree(out);
  // Fails late: the training split is written before the empty validation domain is found.
  o.validation = {{"empty", {dir.file("blank.txt")}}};
  o.shard_tokens = 300;
  EXPECT_NE(error_of([&] { prepare_data(o); }).find("has no documents"), std::string::npos);
  EXPECT_EQ(tree(out), before);
  for (const auto& entry : fs::directory_iterator(dir.path()))
    EXPECT_NE(entry.path().filename().string().rfind(".tmp-", 0), 0u) << "leftover " << entry.path();
}

TEST(DataPrep, ValidationSpecsParseAndBadOnesAreErrors) {
  EXPECT_EQ(parse_validation_spec("moby_dick=a.txt"),
            (std::pair<std::string, std::vector<std::string>>{"moby_dick", {"a.txt"}}));
  EXPECT_EQ(parse_validation_spec("sotu-2015+.v2=x/a.txt,b=c.txt"),
            (std::pair<std::string, std::vector<std::string>>{"sotu-2015+.v2", {"x/a.txt", "b=c.txt"}}));
  const std::pair<const char*, const char*> bad[] = {
      {"moby_dick", "expected NAME=FILE[,FILE...]"},
      {"=a.txt", "the validation domain name is empty"},
      {"moby=", "no files after '='"},
      {"moby=a.txt,,b.txt", "empty file name"},
      {"moby=a.txt,", "empty file name"},
      {"two words=a.txt", "may hold only letters"},
      {".hidden=a.txt", "may not start with '.'"},
      {"a/b=a.txt", "may hold only letters"},
  };
  for (const auto& [spec, expected] : bad) {
    const std::string message = error_of([&] { parse_validation_spec(spec); });
    EXPECT_NE(message.find(expected), std::string::npos) << spec << ": " << message;
    EXPECT_NE(message.find(std::string("--validation '") + spec + "'"), std::string::npos) << message;
  }
}

TEST(DataPrep, PreparedFoldersServeAsRecipeDataPaths) {
  std::mt19937 rng(808);
  ScratchFolder dir;
  const auto train = write_random_files(dir, "train", 2, rng);
  PrepOptions o = options_for(dir.path() / "prepared", train);
  o.shard_tokens = 400;
  prepare_data(o);
  const std::unique_ptr<Tokenizer> bytes = make_tokenizer("bytes");
  const auto source = open_tokens({(dir.path() / "prepared" / "train").string()}, *bytes, DocumentSplit::per_line, 264);
  std::vector<uint32_t> tokens(source->size());
  source->read(0, tokens);
  EXPECT_EQ(tokens, tokenize_text_files(train, DocumentSplit::per_line, *bytes));
  // The output folder itself is not a token list: the error names the shard folders to use.
  const std::string message =
      error_of([&] { open_tokens({(dir.path() / "prepared").string()}, *bytes, DocumentSplit::per_line, 264); });
  EXPECT_NE(message.find("is a data prep output folder"), std::string::npos) << message;
  EXPECT_NE(message.find((dir.path() / "prepared" / "train").string()), std::string::npos) << message;
  // Shards written for another vocabulary are another tokenizer's.
  fs::create_directory(dir.path() / "other");
  write_shard(dir.file("other/s.bin"), fathom::testing::random_tokens(100, 300, 1), 300);
  const std::string mismatch =
      error_of([&] { open_tokens({(dir.path() / "other").string()}, *bytes, DocumentSplit::per_line, 512); });
  EXPECT_NE(mismatch.find("written for a vocabulary of 300 ids, but tokenizer"), std::string::npos) << mismatch;
}

TEST(DataPrep, ProgressGoesToTheGivenStream) {
  std::mt19937 rng(909);
  ScratchFolder dir;
  const auto train = write_random_files(dir, "train", 2, rng);
  std::ostringstream progress;
  PrepOptions o = options_for(dir.path() / "out", train);
  o.progress = &progress;
  prepare_data(o);
  uint64_t total = 0;
  for (const std::string& f : train) total += fs::file_size(f);
  char expected[64];
  std::snprintf(expected, sizeof expected, "%.1f/%.1f MB", double(total) / 1e6, double(total) / 1e6);
  EXPECT_NE(progress.str().find(expected), std::string::npos) << progress.str();
  EXPECT_NE(progress.str().find("100%"), std::string::npos) << progress.str();
}
