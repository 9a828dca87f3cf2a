// How a run is started from the command line (train --resume / --overwrite; tests run quiet).
#pragma once
#include <filesystem>

namespace fathom {

struct RunOptions {
  bool resume = false;     // continue from the run folder's latest checkpoint
  bool overwrite = false;  // replace an existing run folder once the new run has a checkpoint (train/run_dir.h)
  bool quiet = false;      // no console lines (tests)
  std::filesystem::path recipe_file;  // the recipe's file, if any: --overwrite must not delete it
};

}  // namespace fathom
