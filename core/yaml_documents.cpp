#include "core/yaml_documents.h"

#include <sstream>

#include <yaml-cpp/eventhandler.h>

namespace fathom {

namespace {

// Sees only where each document starts; building no nodes keeps the check pass cheap.
class DocumentStarts : public YAML::EventHandler {
 public:
  YAML::Mark last_start;

  void OnDocumentStart(const YAML::Mark& mark) override { last_start = mark; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// The byte at a mark, found by line and column: yaml-cpp's pos counts the replacement characters it
// puts for invalid UTF-8 (3 bytes each), which would shift a byte offset.
char char_at(const std::string& text, const YAML::Mark& mark) {
  size_t line_start = 0;
  for (int line = 0; line < mark.line && line_start != std::string::npos; ++line) {
    line_start = text.find('\n', line_start);
    if (line_start != std::string::npos) ++line_start;
  }
  const size_t at = line_start == std::string::npos ? text.size() : line_start + static_cast<size_t>(mark.column);
  return at < text.size() ? text[at] : '?';
}

// Walks the documents as LoadAll would. A document that consumed no token leaves the parser where
// it was, so the next one starts at the same place: that is the endless loop, refused here.
void check_documents_advance(const std::string& text) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentStarts starts;
  bool first = true;
  YAML::Mark previous;
  while (parser.HandleNextDocument(starts)) {
    const YAML::Mark start = starts.last_start;
    if (!first && start.pos == previous.pos) {
      const char found = char_at(text, start);
      std::string message = found == ',' ? "',' outside [...] or {...} (quote a value that holds a comma)"
                                         : "this token cannot start a value here";
      throw YAML::ParserException(start, message);
    }
    first = false;
    previous = start;
  }
}

}  // namespace

std::vector<YAML::Node> load_yaml_documents(const std::string& text) {
  check_documents_advance(text);
  return YAML::LoadAll(text);
}

}  // namespace fathom
