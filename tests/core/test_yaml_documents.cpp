#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/yaml_documents.h"

using namespace fathom;

namespace {

// The mark of the ParserException that load_yaml_documents throws for `text` (line -1 if none).
YAML::Mark failure_mark(const std::string& text, std::string* message = nullptr) {
  try {
    load_yaml_documents(text);
  } catch (const YAML::ParserException& e) {
    if (message) *message = e.msg;
    return e.mark;
  }
  ADD_FAILURE() << "accepted: " << text;
  return YAML::Mark::null_mark();
}

}  // namespace

// yaml-cpp 0.7's LoadAll loops forever (appending empty documents) on each of these.
TEST(YamlDocuments, StrayCommaAtDocumentLevelIsAnErrorNotAHang) {
  struct Case {
    std::string text;
    int line, column;  // 1-based, where the stray token is
  };
  const std::vector<Case> cases = {
      {",", 1, 1},
      {"   ,", 1, 4},
      {"# a comment\n, step: 3\n", 2, 1},
      {"{a: 1}\n,\n", 2, 1},
      {"[a]\n, b\n", 2, 1},
      {"a: 1\n---\n,\n", 3, 1},
      {"a: 1\n...\n,\n", 3, 1},
      {"%YAML 1.2\n---\n,\n", 3, 1},
      {"!tag ,", 1, 6},
      {"&anchor ,", 1, 9},
      {"|\n text\n,\n", 3, 1},
      {"# \xff\xff invalid UTF-8 before the comma\n,\n", 2, 1},
  };
  for (const Case& c : cases) {
    std::string message;
    const YAML::Mark mark = failure_mark(c.text, &message);
    EXPECT_EQ(mark.line + 1, c.line) << c.text;
    EXPECT_EQ(mark.column + 1, c.column) << c.text;
    EXPECT_EQ(message, "',' outside [...] or {...} (quote a value that holds a comma)") << c.text;
  }
}

TEST(YamlDocuments, ValidStreamsLoadAsWithLoadAll) {
  const std::vector<std::string> streams = {
      "",
      "# only a comment\n",
      "a: 1\n",
      "a: 1\n---\nb: [x, y]\n",
      "---\n---\n---\nc: 3\n",
      "a: 1\n...\n---\nb: 2\n...\n",
      "- a, b\n- c\n",
      "a\n, b\n",  // a multi-line plain scalar: "a , b"
      "x: {p: 1, q: [2, 3]}\n",
      "a: &shared 1\nb: *shared\n",
  };
  for (const std::string& text : streams) {
    const std::vector<YAML::Node> expected = YAML::LoadAll(text);
    const std::vector<YAML::Node> got = load_yaml_documents(text);
    ASSERT_EQ(got.size(), expected.size()) << text;
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(YAML::Dump(got[i]), YAML::Dump(expected[i])) << text;
  }
}

TEST(YamlDocuments, SyntaxErrorsStayYamlCppErrors) {
  std::string message;
  const YAML::Mark mark = failure_mark("a: [1, 2\nb: 3\n", &message);
  EXPECT_EQ(message, "end of sequence flow not found");
  EXPECT_EQ(mark.line, 1);
}
