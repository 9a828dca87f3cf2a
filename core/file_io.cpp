#include "core/file_io.h"

#include <stdio.h>  // renameat2, RENAME_EXCHANGE

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>

#include "core/error.h"

namespace fathom {

namespace {

std::string errno_text() { return std::strerror(errno); }

}  // namespace

std::string temp_name_for(std::string_view name) {
  return std::string(kTempPrefix) + std::string(name) + "-" + std::to_string(::getpid());
}

bool temp_entry_is_stale(std::string_view name) {
  if (name.substr(0, kTempPrefix.size()) != kTempPrefix) return false;
  const size_t dash = name.rfind('-');
  long pid = 0;
  const std::string_view digits = name.substr(dash + 1);
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
  if (ec != std::errc() || end != digits.data() + digits.size() || pid <= 0) return true;
  if (pid == long(::getpid())) return true;  // an earlier, failed attempt of this very process
  // Signal 0 only probes: EPERM still means the process exists (owned by someone else).
  return ::kill(pid_t(pid), 0) != 0 && errno == ESRCH;
}

AtomicFileWriter::AtomicFileWriter(std::filesystem::path target) : target_(std::move(target)) {
  // A per-process counter keeps two writers of the same target in one process apart.
  static std::atomic<uint64_t> counter{0};
  temp_ =
      target_.parent_path() / temp_name_for(target_.filename().string() + "." + std::to_string(counter.fetch_add(1)));
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  FATHOM_CHECK(fd_ >= 0, "cannot write ", target_, ": creating the temporary file ", temp_, " failed: ", errno_text());
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_.c_str());
}

void AtomicFileWriter::write(const void* data, size_t bytes) {
  FATHOM_CHECK(fd_ >= 0, "cannot write ", target_, ": the file was already committed");
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    FATHOM_CHECK(n > 0, "writing ", target_, " failed: ", n < 0 ? errno_text() : "no progress");
    p += n;
    bytes -= size_t(n);
  }
}

void AtomicFileWriter::commit() {
  FATHOM_CHECK(fd_ >= 0, "cannot commit ", target_, " twice");
  FATHOM_CHECK(::fsync(fd_) == 0, "fsync of ", temp_, " failed: ", errno_text());
  const int fd = fd_;
  fd_ = -1;
  FATHOM_CHECK(::close(fd) == 0, "closing ", temp_, " failed: ", errno_text());
  FATHOM_CHECK(::rename(temp_.c_str(), target_.c_str()) == 0, "cannot move ", temp_, " into place as ", target_, ": ",
               errno_text());
  committed_ = true;
  fsync_directory(target_.parent_path());
}

void write_file_atomically(const std::filesystem::path& target, std::string_view contents) {
  AtomicFileWriter writer(target);
  writer.write(contents);
  writer.commit();
}

void fsync_directory(const std::filesystem::path& folder) {
  const std::filesystem::path path = folder.empty() ? std::filesystem::path(".") : folder;
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  FATHOM_CHECK(fd >= 0, "cannot open folder ", path, " to fsync it: ", errno_text());
  const int rc = ::fsync(fd);
  const std::string error = rc == 0 ? "" : errno_text();
  ::close(fd);
  FATHOM_CHECK(rc == 0, "fsync of folder ", path, " failed: ", error);
}

ReadOnlyFile::ReadOnlyFile(std::filesystem::path path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  FATHOM_CHECK(fd_ >= 0, "cannot open ", path_, ": ", errno_text());
  struct stat info {};
  if (::fstat(fd_, &info) != 0) {
    const std::string error = errno_text();
    ::close(fd_);
    FATHOM_FAIL("cannot stat ", path_, ": ", error);
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd_);
    FATHOM_FAIL(path_, " is not a regular file", S_ISDIR(info.st_mode) ? " (it is a folder)" : "");
  }
  size_ = uint64_t(info.st_size);
}

ReadOnlyFile::~ReadOnlyFile() {
  if (fd_ >= 0) ::close(fd_);
}

void ReadOnlyFile::read_at(uint64_t offset, void* destination, size_t bytes) const {
  char* p = static_cast<char*>(destination);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd_, p, bytes, off_t(offset));
    if (n < 0 && errno == EINTR) continue;
    FATHOM_CHECK(n >= 0, "reading ", path_, " failed: ", errno_text());
    FATHOM_CHECK(n > 0, path_, " ended at byte ", offset, " while ", bytes,
                 " more bytes were expected (file truncated?)");
    p += n;
    offset += uint64_t(n);
    bytes -= size_t(n);
  }
}

std::string read_file(const std::filesystem::path& path, uint64_t max_bytes) {
  ReadOnlyFile file(path);
  FATHOM_CHECK(file.size() <= max_bytes, path, " is ", file.size(), " bytes, more than the ", max_bytes,
               " expected for this file");
  std::string contents(size_t(file.size()), '\0');
  file.read_at(0, contents.data(), contents.size());
  return contents;
}

void remove_all_or_fail(const std::filesystem::path& path, const char* why) {
  std::error_code error;
  std::filesystem::remove_all(path, error);
  FATHOM_CHECK(!error, "cannot remove ", path, " (", why, "): ", error.message());
}

TempFolderGuard::~TempFolderGuard() {
  std::error_code ignored;  // best effort: a leftover ".tmp-" folder is recognisably stale
  if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
}

void retire_folder(const std::filesystem::path& folder) {
  const std::filesystem::path aside = folder.parent_path() / temp_name_for("retired-" + folder.filename().string());
  FATHOM_CHECK(::rename(folder.c_str(), aside.c_str()) == 0, "cannot move ", folder,
               " aside to delete it: ", errno_text());
  remove_all_or_fail(aside, "replaced or retired");
}

void move_folder_into_place(const std::filesystem::path& temp, const std::filesystem::path& target) {
  if (::rename(temp.c_str(), target.c_str()) == 0) return;
  FATHOM_CHECK(errno == ENOTEMPTY || errno == EEXIST || errno == EISDIR || errno == ENOTDIR, "cannot rename ", temp,
               " to ", target, ": ", errno_text());
  if (::renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
    remove_all_or_fail(temp, "the replaced folder");
    return;
  }
  // File systems without RENAME_EXCHANGE: move the old folder aside, then rename.
  retire_folder(target);
  FATHOM_CHECK(::rename(temp.c_str(), target.c_str()) == 0, "cannot rename ", temp, " to ", target, ": ", errno_text());
}

}  // namespace fathom
