#include "data/text.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"

namespace fathom {

namespace {

bool is_blank(std::string_view text) {
  return text.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

std::ifstream open_text_file(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  FATHOM_CHECK(std::filesystem::exists(status), "text file ", path, " does not exist");
  FATHOM_CHECK(std::filesystem::is_regular_file(status), "text file ", path, " is not a regular file");
  std::ifstream in(path, std::ios::binary);
  FATHOM_CHECK(in.is_open(), "cannot open text file ", path, ": ", std::strerror(errno));
  return in;
}

}  // namespace

DocumentSplit parse_document_split(const std::string& name) {
  if (name == "lines") return DocumentSplit::per_line;
  if (name == "files") return DocumentSplit::whole_file;
  FATHOM_FAIL("unknown document split '", name,
              "' (known: lines = one document per line, files = one document per file)");
}

void for_each_document(const std::string& path, DocumentSplit split,
                       const std::function<void(std::string_view)>& visit) {
  std::ifstream in = open_text_file(path);
  if (split == DocumentSplit::per_line) {
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (!is_blank(line)) visit(line);
    }
  } else {
    const std::string content{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (!is_blank(content)) visit(content);
  }
  FATHOM_CHECK(!in.bad(), "error while reading text file ", path);
}

std::vector<std::string> read_documents(const std::string& path, DocumentSplit split) {
  std::vector<std::string> documents;
  for_each_document(path, split, [&](std::string_view doc) { documents.emplace_back(doc); });
  return documents;
}

std::vector<uint32_t> tokenize_text_files(const std::vector<std::string>& paths, DocumentSplit split,
                                          const Tokenizer& tokenizer) {
  std::vector<uint32_t> tokens;
  size_t documents = 0;
  for (const std::string& path : paths) {
    for_each_document(path, split, [&](std::string_view doc) {
      if (documents++ > 0) tokens.push_back(tokenizer.eos_id());
      const std::vector<uint32_t> ids = tokenizer.encode(doc);
      tokens.insert(tokens.end(), ids.begin(), ids.end());
    });
  }
  if (documents == 0) {
    std::string names;
    for (const std::string& path : paths) names += (names.empty() ? "" : ", ") + path;
    FATHOM_FAIL("no documents found in text files [", names, "]: every file is empty or blank");
  }
  return tokens;
}

}  // namespace fathom
