// Loading YAML text (recipes) into yaml-cpp nodes without yaml-cpp 0.7's LoadAll hang.
#pragma once
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace fathom {

// Every document of `text`, like YAML::LoadAll, and like it throwing YAML::ParserException (with
// the position in its mark) on bad syntax. It also throws where yaml-cpp 0.7's LoadAll would never
// return: a token that cannot start a node at document level (a ',' outside [...] and {...}, as in
// "# comment\n, x") is left unconsumed, so LoadAll appends empty documents forever (gigabytes within
// seconds; yaml-cpp issue #1040, fixed upstream after 0.8).
std::vector<YAML::Node> load_yaml_documents(const std::string& text);

}  // namespace fathom
