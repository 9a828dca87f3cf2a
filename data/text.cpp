#include "data/text.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"

namespace fathom {

namespace {

bool is_blank(std::string_view text) { return text.find_first_not_of(" \t\r\n") == std::string_view::npos; }

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

void for_each_document_in(std::string_view text, DocumentSplit split,
                          const std::function<void(std::string_view)>& visit) {
  if (split == DocumentSplit::whole_file) {
    if (!is_blank(text)) visit(text);
    return;
  }
  while (!text.empty()) {
    const size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!is_blank(line)) visit(line);
  }
}

TextPieceReader::TextPieceReader(const std::string& path, DocumentSplit split, size_t piece_bytes)
    : path_(path), split_(split), piece_bytes_(piece_bytes), in_(open_text_file(path)) {
  FATHOM_CHECK(piece_bytes > 0, "text piece size must be positive");
}

bool TextPieceReader::next(std::string& piece) {
  piece = std::move(carry_);
  carry_.clear();
  while (!at_end_) {
    const size_t old_size = piece.size();
    const size_t want = split_ == DocumentSplit::whole_file ? size_t(1) << 24 : piece_bytes_;
    piece.resize(old_size + want);
    in_.read(piece.data() + old_size, std::streamsize(want));
    const size_t got = size_t(in_.gcount());
    piece.resize(old_size + got);
    FATHOM_CHECK(!in_.bad(), "error while reading text file ", path_);
    if (got < want) at_end_ = true;
    if (split_ == DocumentSplit::whole_file) continue;  // read on to the end of the file
    // Cut after the last line end of the new bytes; earlier bytes hold none.
    const size_t cut = std::string_view(piece).substr(old_size).rfind('\n');
    if (cut != std::string_view::npos) {
      carry_.assign(piece, old_size + cut + 1);
      piece.resize(old_size + cut + 1);
      return true;
    }
  }
  return !piece.empty();
}

void for_each_document(const std::string& path, DocumentSplit split,
                       const std::function<void(std::string_view)>& visit) {
  TextPieceReader reader(path, split, size_t(1) << 20);
  for (std::string piece; reader.next(piece);) for_each_document_in(piece, split, visit);
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
