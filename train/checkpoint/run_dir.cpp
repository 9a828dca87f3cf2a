#include "train/checkpoint/run_dir.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/file_io.h"
#include "core/path_safety.h"
#include "train/checkpoint/checkpoint.h"

namespace fathom {

namespace fs = std::filesystem;

namespace {

std::string replaced_prefix(const fs::path& dir) {
  return std::string(kTempPrefix) + "replaced-" + dir.filename().string() + "-";
}

fs::path parent_of(const fs::path& dir) {
  const fs::path absolute = fs::absolute(dir).lexically_normal();
  return (absolute.has_filename() ? absolute : absolute.parent_path()).parent_path();
}

// A log.dir that cannot become a folder fails here, before any work: an existing file, or a path
// through a file.
void check_can_be_folder(const fs::path& dir) {
  std::error_code error;
  const fs::file_status status = fs::status(dir, error);
  if (fs::exists(status)) {
    FATHOM_CHECK(fs::is_directory(status), "log.dir ", dir,
                 " exists and is not a folder; set log.dir to a folder path, or move the file away");
    return;
  }
  for (fs::path above = fs::absolute(dir).parent_path(); !above.empty(); above = above.parent_path()) {
    const fs::file_status s = fs::status(above, error);
    if (!fs::exists(s)) {
      if (above == above.parent_path()) break;
      continue;
    }
    FATHOM_CHECK(fs::is_directory(s), "cannot create the run folder ", dir, ": ", above,
                 " is a file, not a folder; set log.dir to a path under a folder");
    break;
  }
}

// Finishes a replacement that a killed process left half done (see run_dir.h).
void recover_interrupted_replacement(const fs::path& dir) {
  const fs::path parent = parent_of(dir);
  std::error_code error;
  if (!fs::is_directory(parent, error)) return;
  const std::string prefix = replaced_prefix(dir);
  for (const auto& entry : fs::directory_iterator(parent, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0 || name.find_first_not_of("0123456789", prefix.size()) != std::string::npos ||
        !temp_entry_is_stale(name))
      continue;
    if (fs::exists(dir, error) && list_checkpoints(dir).empty()) {
      remove_all_or_fail(dir, "a run that replaced an older one and was killed before its first checkpoint");
    }
    if (!fs::exists(dir, error)) {
      FATHOM_CHECK(::rename(entry.path().c_str(), dir.c_str()) == 0, "cannot restore the run ", dir, " from ",
                   entry.path(), "; move it back by hand");
      std::fprintf(stderr, "fathom: restored %s, which an interrupted --overwrite had moved aside\n",
                   dir.string().c_str());
    } else {
      remove_all_or_fail(entry.path(), "the run an earlier --overwrite replaced");
    }
    return;
  }
}

}  // namespace

RunFolder::RunFolder(fs::path dir, const RunFolderRequest& request) : dir_(std::move(dir)), request_(request) {
  FATHOM_CHECK(!(request.resume && request.overwrite), "--resume continues the run in ", dir_,
               " and --overwrite starts it again; pass only one of them");
  check_can_be_folder(dir_);
  recover_interrupted_replacement(dir_);
  const bool has_checkpoint = latest_checkpoint(dir_).has_value();
  if (request.resume) {
    FATHOM_CHECK(has_checkpoint, "--resume: no checkpoint to resume from in '", dir_.string(),
                 "'; start the run without --resume");
    return;
  }
  std::error_code error;
  if (request.overwrite && fs::exists(dir_, error)) {
    check_safe_to_replace(dir_, request.sources, "train --overwrite");
    return;
  }
  FATHOM_CHECK(!has_checkpoint, "run folder '", dir_.string(),
               "' already holds checkpoints; pass --resume to continue that run, --overwrite to start it "
               "again, or set log.dir to another folder");
}

void RunFolder::open() {
  std::error_code error;
  if (!request_.resume && request_.overwrite && fs::exists(dir_, error)) {
    const fs::path aside = parent_of(dir_) / temp_name_for("replaced-" + dir_.filename().string());
    FATHOM_CHECK(::rename(dir_.c_str(), aside.c_str()) == 0, "--overwrite: cannot move the old run ", dir_,
                 " aside to ", aside, ": ", std::strerror(errno));
    replaced_ = aside;
  }
  fs::create_directories(dir_, error);
  FATHOM_CHECK(!error, "cannot create the run folder ", dir_, ": ", error.message(),
               "; set log.dir to a folder you can write");
  remove_checkpoint_leftovers(dir_);
}

void RunFolder::commit() {
  if (replaced_.empty()) return;
  const fs::path old = replaced_;
  replaced_.clear();
  remove_all_or_fail(old, "the run --overwrite replaced");
}

RunFolder::~RunFolder() {
  if (replaced_.empty()) return;
  // The new run has no checkpoint: the old run is worth more than its partial output.
  std::error_code ignored;
  fs::remove_all(dir_, ignored);
  if (::rename(replaced_.c_str(), dir_.c_str()) != 0)
    std::fprintf(stderr, "fathom: the old run could not be put back; it is in %s\n", replaced_.string().c_str());
}

}  // namespace fathom
