// Text files as documents for tokenization: either one document per line (like the State of the
// Union files) or the whole file as one document. Bytes are passed through untouched (no UTF-8
// validation), which suits byte-level tokenizers.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

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

std::vector<std::string> read_documents(const std::string& path, DocumentSplit split);

// Tokenizes the documents of all files, in order, with the tokenizer's EOS between consecutive
// documents (also across files). No documents at all is an error naming the files.
std::vector<uint32_t> tokenize_text_files(const std::vector<std::string>& paths, DocumentSplit split,
                                          const Tokenizer& tokenizer);

}  // namespace fathom
