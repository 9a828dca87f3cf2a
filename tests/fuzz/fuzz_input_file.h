// The file parsers take paths, not bytes: each fuzz input is written to one scratch file per process
// in a private folder (reused across runs, removed at exit; nothing else lies beside it, e.g. no
// tokenizer_config.json), so the fuzzers test the real API without adding to it.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace fathom::fuzz {

class FuzzInputFile {
 public:
  explicit FuzzInputFile(const std::string& suffix) {
    const char* tmp = std::getenv("TMPDIR");
    folder_ = std::string(tmp && *tmp ? tmp : "/tmp") + "/fathom_fuzz_" + std::to_string(::getpid());
    std::filesystem::create_directories(folder_);
    path_ = folder_ + "/input" + suffix;
  }
  ~FuzzInputFile() {
    std::error_code ignored;
    std::filesystem::remove_all(folder_, ignored);
  }
  // Replaces the file's content with the input bytes; returns the path.
  const std::string& write(const uint8_t* data, size_t size) {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
    out.close();
    if (!out) {
      std::fprintf(stderr, "cannot write fuzz input to %s\n", path_.c_str());
      std::abort();
    }
    return path_;
  }

 private:
  std::string folder_;
  std::string path_;
};

}  // namespace fathom::fuzz
