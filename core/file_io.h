// Files that survive crashes: writes go to a temporary sibling, are fsynced, then renamed over the
// target (and the folder fsynced), so a reader sees the old file or the new one, never a half one.
// Temporary entries are named ".tmp-<name>-<pid>"; a crash may leave them behind, readers ignore
// them and temp_entry_is_stale() tells a cleaner which ones belong to no running process.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace fathom {

inline constexpr std::string_view kTempPrefix = ".tmp-";

// ".tmp-<name>-<pid of this process>".
std::string temp_name_for(std::string_view name);
// True for a ".tmp-" entry whose owner process is gone (or whose name carries no pid), so that
// deleting it cannot disturb a save in progress. False for other names and for live owners.
bool temp_entry_is_stale(std::string_view name);

// Streams bytes into a temporary file next to `target`; commit() makes them durable and atomically
// visible under the target name. Destroyed without commit(), it removes the temporary file.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::filesystem::path target);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t bytes);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  // fsync, close, rename over the target, fsync the folder.
  void commit();

 private:
  std::filesystem::path target_;
  std::filesystem::path temp_;
  int fd_ = -1;
  bool committed_ = false;
};

void write_file_atomically(const std::filesystem::path& target, std::string_view contents);
// Makes renames and creations inside `folder` durable.
void fsync_directory(const std::filesystem::path& folder);

// Renames the finished folder `temp` to `target` (a sibling). An existing `target` folder is
// exchanged with it atomically where the file system allows, so the name never disappears, and
// the old contents are then deleted; elsewhere the old folder is first moved aside.
void move_folder_into_place(const std::filesystem::path& temp, const std::filesystem::path& target);

// A file opened for positioned reads; every short read is an error naming the file.
class ReadOnlyFile {
 public:
  explicit ReadOnlyFile(std::filesystem::path path);
  ~ReadOnlyFile();
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;

  uint64_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }
  void read_at(uint64_t offset, void* destination, size_t bytes) const;

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// The whole file as bytes; refuses files larger than max_bytes (a guard against reading a huge
// file where a small one was expected).
std::string read_file(const std::filesystem::path& path, uint64_t max_bytes = UINT64_MAX);

}  // namespace fathom
