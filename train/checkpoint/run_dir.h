// How `train` takes its run folder (log.dir) without ever losing a run it should keep:
//   - the constructor only checks (nothing is written): --resume needs a checkpoint, a fresh start
//     refuses a folder that holds one unless --overwrite, --overwrite never replaces what the run
//     reads or the current folder (core/path_safety.h), log.dir must be creatable as a folder;
//   - open(), called once everything else about the run is known to be valid, makes the folder. For
//     --overwrite it moves the old run aside to a ".tmp-replaced-<name>-<pid>" sibling first;
//   - commit(), called once the new run has saved its first checkpoint, deletes the old run.
// A run that ends without a checkpoint (an error, a stop before the first step) puts the old run
// back. If the process was killed instead, the next start for the same log.dir finishes the job:
// the old run comes back when the new folder has no checkpoint, else it is deleted.
#pragma once
#include <filesystem>
#include <vector>

namespace fathom {

struct RunFolderRequest {
  bool resume = false;
  bool overwrite = false;
  std::vector<std::filesystem::path> sources;  // what the run reads, which --overwrite must not remove
};

class RunFolder {
 public:
  RunFolder(std::filesystem::path dir, const RunFolderRequest& request);
  ~RunFolder();
  RunFolder(const RunFolder&) = delete;
  RunFolder& operator=(const RunFolder&) = delete;

  const std::filesystem::path& path() const { return dir_; }
  void open();
  void commit();

 private:
  std::filesystem::path dir_;
  RunFolderRequest request_;
  std::filesystem::path replaced_;  // the old run while the new one has no checkpoint yet
};

}  // namespace fathom
