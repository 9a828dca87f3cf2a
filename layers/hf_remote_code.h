// The Python files of a remote-code HF export (layers/hf_remote/*.py: fathom_core.py, the model's
// math in plain PyTorch, and modeling_fathom.py, its transformers classes), embedded in the library at
// build time by cmake/embed_files.cmake.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace fathom {

struct HfRemoteFile {
  std::string name;           // the file name the export folder gets
  std::string_view contents;  // its bytes
};

// Every embedded file, by name.
const std::vector<HfRemoteFile>& hf_remote_code_files();

}  // namespace fathom
