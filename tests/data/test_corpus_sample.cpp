// The committed corpus sample (data/corpus/sample, written by scripts/build_corpus.sh): every
// source is there, one document per line, small, and no held-out document is in training.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "tests/support/data_test_helpers.h"

namespace fs = std::filesystem;

namespace {

const fs::path kSample = fs::path(FATHOM_SOURCE_DIR) / "data" / "corpus" / "sample";
const char* kTrain[] = {"train/sotu_1790-2014.txt",
                        "train/kjv.txt",
                        "train/web.txt",
                        "train/austen.txt",
                        "train/treasury_of_david.txt",
                        "train/linux_kernel_docs.txt",
                        "train/python_docs.txt",
                        "train/perl_docs.txt",
                        "train/postgresql_docs.txt",
                        "train/git_docs.txt",
                        "train/rust_docs.txt",
                        "train/django_docs.txt",
                        "train/debian_handbook.txt"};
const char* kValidation[] = {"validation/moby_dick.txt", "validation/sotu_2015-2021.txt",
                             "validation/linux_filesystems.txt", "validation/python_howto.txt"};

std::vector<std::string> lines_of(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

TEST(CorpusSample, EverySourceIsPresentAsOneDocumentPerLine) {
  uintmax_t total = 0;
  const std::string sources = fathom::testing::read_bytes((kSample / "SOURCES.md").string());
  for (const auto& list : {std::vector<const char*>(std::begin(kTrain), std::end(kTrain)),
                           std::vector<const char*>(std::begin(kValidation), std::end(kValidation))}) {
    for (const char* name : list) {
      const fs::path path = kSample / name;
      ASSERT_TRUE(fs::exists(path)) << path;
      total += fs::file_size(path);
      const std::vector<std::string> lines = lines_of(path);
      EXPECT_GE(lines.size(), 4u) << name;
      for (const std::string& line : lines) {
        EXPECT_GT(line.size(), 100u) << name << ": a document is a whole address, chapter or page";
        EXPECT_EQ(line.find('\r'), std::string::npos) << name;
      }
      EXPECT_NE(sources.find(std::string("`") + name + "`"), std::string::npos) << "SOURCES.md does not list " << name;
    }
  }
  EXPECT_LT(total, uintmax_t(2) << 20) << "the committed sample should stay under 2 MB";
}

TEST(CorpusSample, NoValidationDocumentIsInTraining) {
  std::set<std::string> training;
  for (const char* name : kTrain)
    for (const std::string& line : lines_of(kSample / name)) training.insert(line);
  for (const char* name : kValidation)
    for (const std::string& line : lines_of(kSample / name)) EXPECT_EQ(training.count(line), 0u) << name;
}
