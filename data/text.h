// Text files as documents for tokenization: either one document per line (like the State of the
// Union files) or the whole file as one document. Bytes are passed through untouched (no UTF-8
// validation), which suits byte-level tokenizers.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <fstream>

#include "data/tokenizer.h"

namespace fathom {

enum class DocumentSplit {
  per_line,    // each non-blank line is a document; a trailing '\r' is dropped
  whole_file,  // the file's full content is one document (unless it is blank)
};

// "lines" or "files" (recipe key data.documents); anything else is an error listing both.
DocumentSplit parse_document_split(const std::string& name);

// Calls `visit` for every document of a text file, streaming (a line at a time in per_line mode).
// Blank documents (empty or only spaces, tabs and line breaks) are skipped. A missing or unreadable
// file is an error naming it.
void for_each_document(const std::string& path, DocumentSplit split,
                       const std::function<void(std::string_view)>& visit);

// Calls `visit` for every document of `text` by the same rules, where `text` holds whole lines
// (per_line) or a whole file (whole_file), such as a piece from TextPieceReader.
void for_each_document_in(std::string_view text, DocumentSplit split,
                          const std::function<void(std::string_view)>& visit);

// Reads a text file in pieces that each hold whole documents, so pieces can be split into
// documents independently (and in parallel): per_line pieces are about `piece_bytes` long and end
// at a line end (a longer line makes a longer piece); a whole_file piece is the whole file.
// The pieces depend only on the file and piece_bytes. A missing or unreadable file is an error.
class TextPieceReader {
 public:
  TextPieceReader(const std::string& path, DocumentSplit split, size_t piece_bytes);
  // The next piece into `piece`; false (and `piece` empty) once the file is used up.
  bool next(std::string& piece);

 private:
  std::string path_;
  DocumentSplit split_;
  size_t piece_bytes_;
  std::ifstream in_;
  std::string carry_;  // the start of a line that the previous read cut
  bool at_end_ = false;
};

std::vector<std::string> read_documents(const std::string& path, DocumentSplit split);

// Tokenizes the documents of all files, in order, with the tokenizer's EOS between consecutive
// documents (also across files). No documents at all is an error naming the files.
std::vector<uint32_t> tokenize_text_files(const std::vector<std::string>& paths, DocumentSplit split,
                                          const Tokenizer& tokenizer);

}  // namespace fathom
