#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "data/byte_tokenizer.h"
#include "data/text.h"
#include "tests/support/data_test_helpers.h"

using namespace fathom;
using fathom::testing::error_of;
using fathom::testing::ScratchFolder;
using fathom::testing::write_bytes;

namespace {

const std::filesystem::path kCorpus = std::filesystem::path(FATHOM_SOURCE_DIR) / "data/corpus/quickstart";

std::vector<std::string> corpus_train_files() {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(kCorpus / "train"))
    if (entry.path().extension() == ".txt") files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

size_t count_of(const std::vector<uint32_t>& tokens, uint32_t id) {
  return size_t(std::count(tokens.begin(), tokens.end(), id));
}

}  // namespace

TEST(TextReading, OneDocumentPerLine) {
  ScratchFolder dir;
  const std::string path = dir.file("docs.txt");
  // CRLF endings, a blank and a whitespace-only line, multibyte text and no final newline.
  write_bytes(path, "first doc\r\n\nsecond \xE2\x80\x94 doc\n   \t\nthird");
  EXPECT_EQ(read_documents(path, DocumentSplit::per_line),
            (std::vector<std::string>{"first doc", "second \xE2\x80\x94 doc", "third"}));
}

TEST(TextReading, WholeFileIsOneDocument) {
  ScratchFolder dir;
  const std::string path = dir.file("book.txt");
  const std::string content = "CHAPTER 1.\n\nCall me Ishmael.\r\nSome years ago\n";
  write_bytes(path, content);
  EXPECT_EQ(read_documents(path, DocumentSplit::whole_file), (std::vector<std::string>{content}));
  write_bytes(path, " \n\n");
  EXPECT_TRUE(read_documents(path, DocumentSplit::whole_file).empty());
}

TEST(TextReading, InvalidUtf8PassesThrough) {
  ScratchFolder dir;
  const std::string path = dir.file("raw.txt");
  const std::string line = std::string("ok \xFF\xFE\xC3 bytes", 12);
  write_bytes(path, line + "\n");
  EXPECT_EQ(read_documents(path, DocumentSplit::per_line), (std::vector<std::string>{line}));
}

TEST(TextReading, TokenizeJoinsDocumentsWithEos) {
  ScratchFolder dir;
  write_bytes(dir.file("a.txt"), "ab\ncd\n");
  write_bytes(dir.file("b.txt"), "\xC3\xA9\n");
  ByteTokenizer tok;
  const std::vector<uint32_t> tokens =
      tokenize_text_files({dir.file("a.txt"), dir.file("b.txt")}, DocumentSplit::per_line, tok);
  EXPECT_EQ(tokens, (std::vector<uint32_t>{'a', 'b', 256, 'c', 'd', 256, 0xC3, 0xA9}));
  const std::vector<uint32_t> whole =
      tokenize_text_files({dir.file("a.txt"), dir.file("b.txt")}, DocumentSplit::whole_file, tok);
  EXPECT_EQ(whole, (std::vector<uint32_t>{'a', 'b', '\n', 'c', 'd', '\n', 256, 0xC3, 0xA9, '\n'}));
}

TEST(TextReading, MissingUnreadableAndEmptyInputsAreErrors) {
  ScratchFolder dir;
  const std::string missing = dir.file("absent.txt");
  std::string message = error_of([&] { read_documents(missing, DocumentSplit::per_line); });
  EXPECT_NE(message.find(missing), std::string::npos) << message;
  EXPECT_NE(message.find("does not exist"), std::string::npos) << message;

  message = error_of([&] { read_documents(dir.path().string(), DocumentSplit::whole_file); });
  EXPECT_NE(message.find("not a regular file"), std::string::npos) << message;

  write_bytes(dir.file("blank.txt"), "\n \n");
  ByteTokenizer tok;
  message = error_of([&] { tokenize_text_files({dir.file("blank.txt")}, DocumentSplit::per_line, tok); });
  EXPECT_NE(message.find("blank.txt"), std::string::npos) << message;
  EXPECT_NE(message.find("no documents"), std::string::npos) << message;
}

TEST(TextReading, ParseDocumentSplit) {
  EXPECT_EQ(parse_document_split("lines"), DocumentSplit::per_line);
  EXPECT_EQ(parse_document_split("files"), DocumentSplit::whole_file);
  const std::string message = error_of([] { parse_document_split("paragraph"); });
  EXPECT_NE(message.find("paragraph"), std::string::npos) << message;
  EXPECT_NE(message.find("line"), std::string::npos) << message;
}

TEST(QuickstartCorpus, TrainingAddressesReadOnePerLine) {
  const std::vector<std::string> files = corpus_train_files();
  ASSERT_FALSE(files.empty()) << "no training text in " << kCorpus;
  size_t bytes = 0, documents = 0;
  for (const std::string& f : files) {
    bytes += std::filesystem::file_size(f);
    const std::vector<std::string> docs = read_documents(f, DocumentSplit::per_line);
    documents += docs.size();
    for (const std::string& d : docs) EXPECT_GT(d.size(), 1000u) << "a short address in " << f;
  }
  EXPECT_GT(bytes, size_t(800'000));
  EXPECT_LT(bytes, size_t(1'500'000));
  EXPECT_GE(documents, 20u);

  ByteTokenizer tok;
  const std::vector<uint32_t> tokens = tokenize_text_files(files, DocumentSplit::per_line, tok);
  EXPECT_EQ(count_of(tokens, tok.eos_id()), documents - 1);
  // Each line is a document: the newlines became separators, so tokens = bytes.
  EXPECT_EQ(tokens.size(), bytes - 1);
  EXPECT_EQ(count_of(tokens, '\n'), 0u);
}

TEST(QuickstartCorpus, ValidationBookRoundTrips) {
  const std::string path = (kCorpus / "validation/moby_dick.txt").string();
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  EXPECT_GT(std::filesystem::file_size(path), size_t(50'000));
  const std::vector<std::string> docs = read_documents(path, DocumentSplit::whole_file);
  ASSERT_EQ(docs.size(), 1u);
  EXPECT_EQ(docs[0].rfind("CHAPTER 1. Loomings.", 0), 0u);
  EXPECT_NE(docs[0].find("\xE2\x80\x94"), std::string::npos);  // multibyte dashes survive
  ByteTokenizer tok;
  const std::vector<uint32_t> tokens = tokenize_text_files({path}, DocumentSplit::whole_file, tok);
  EXPECT_EQ(tok.decode(tokens), docs[0]);
  EXPECT_TRUE(std::filesystem::exists(kCorpus / "SOURCES.md"));
}
