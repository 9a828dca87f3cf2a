// Running the fathom binary from a test: its exit status, with stdout and stderr left in files of the
// scratch folder (out.txt, err.txt).
#pragma once
#include <sys/wait.h>

#include <cstdlib>
#include <string>

#include "tests/support/test_support.h"

namespace fathom::testing {

inline int run_fathom(const ScratchFolder& dir, const std::string& arguments) {
  const std::string command = std::string(FATHOM_BINARY) + " " + arguments + " > " + (dir / "out.txt").string() +
                              " 2> " + (dir / "err.txt").string();
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace fathom::testing
