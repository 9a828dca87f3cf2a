#include "data/manifest_verify.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/file_io.h"
#include "core/json_reader.h"
#include "core/sha256.h"
#include "core/thread_pool.h"
#include "data/prep.h"

namespace fathom {

namespace fs = std::filesystem;

namespace {

constexpr const char* kVerifiedFile = ".fathom-verified";

// A file's state: a rewrite changes its size or its modification time.
struct FileState {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  bool operator==(const FileState&) const = default;
};

FileState state_of(const fs::path& path) {
  struct stat info {};
  FATHOM_CHECK(::stat(path.c_str(), &info) == 0, "cannot stat the shard ", path);
  return {uint64_t(info.st_size), int64_t(info.st_mtim.tv_sec) * 1000000000 + info.st_mtim.tv_nsec};
}

// One prep output's manifest: shard file (relative to the manifest's folder) -> SHA-256.
struct Manifest {
  fs::path folder;
  std::map<std::string, std::string> sha256;
  // Shards already checked in this state: file -> (state, the digest it matched).
  std::map<std::string, std::pair<FileState, std::string>> verified;
};

Manifest read_manifest(const fs::path& folder) {
  Manifest m;
  m.folder = folder;
  const fs::path path = folder / kPrepManifestFile;
  const JsonValue root = read_json(read_file(path, uint64_t(1) << 30), path.string());
  auto read_split = [&](const JsonValue* split) {
    const JsonValue* shards = split ? split->find("shards") : nullptr;
    if (!shards || !shards->is_array()) return;
    for (const JsonValue& shard : shards->items()) {
      const JsonValue* file = shard.find("file");
      const JsonValue* sha = shard.find("sha256");
      if (file && sha && file->is_string() && sha->is_string()) m.sha256[file->text()] = sha->text();
    }
  };
  read_split(root.find("train"));
  if (const JsonValue* validation = root.find("validation"); validation && validation->is_object())
    for (const JsonValue& split : validation->items()) read_split(&split);

  // "<size> <mtime_ns> <sha256> <file>" per line; anything unreadable is simply not trusted.
  std::error_code error;
  if (fs::is_regular_file(folder / kVerifiedFile, error)) {
    std::istringstream lines(read_file(folder / kVerifiedFile, uint64_t(64) << 20));
    FileState s;
    std::string sha, file;
    while (lines >> s.size >> s.mtime_ns >> sha && std::getline(lines >> std::ws, file)) m.verified[file] = {s, sha};
  }
  return m;
}

void save_verified(const Manifest& m) {
  std::string text;
  for (const auto& [file, entry] : m.verified)
    text += std::to_string(entry.first.size) + " " + std::to_string(entry.first.mtime_ns) + " " + entry.second + " " +
            file + "\n";
  try {
    write_file_atomically(m.folder / kVerifiedFile, text);
  } catch (const Error&) {
    // A read-only data folder: the next run checks again.
  }
}

// The prep output folder a shard lies in: DIR for DIR/train/x.bin and DIR/validation/<d>/x.bin.
std::optional<fs::path> manifest_folder_of(const fs::path& shard) {
  std::error_code error;
  fs::path folder = fs::absolute(shard, error).lexically_normal().parent_path();
  for (int up = 0; up < 2 && !folder.empty(); ++up, folder = folder.parent_path()) {
    if (fs::is_regular_file(folder.parent_path() / kPrepManifestFile, error)) return folder.parent_path();
    if (folder == folder.parent_path()) break;
  }
  return std::nullopt;
}

struct Job {
  Manifest* manifest;
  std::string file;  // relative to the manifest's folder
  fs::path path;
  FileState state;
};

}  // namespace

ShardVerify parse_shard_verify(const std::string& mode) {
  if (mode == "auto") return ShardVerify::automatic;
  if (mode == "always") return ShardVerify::always;
  FATHOM_CHECK(mode == "never", "data.verify must be auto, always or never; got '", mode, "'");
  return ShardVerify::never;
}

void verify_shards(const std::vector<std::string>& files, ShardVerify mode) {
  if (mode == ShardVerify::never) return;
  std::map<fs::path, Manifest> manifests;
  std::vector<Job> jobs;
  for (const std::string& file : files) {
    if (fs::path(file).extension() != ".bin") continue;
    const std::optional<fs::path> folder = manifest_folder_of(file);
    FATHOM_CHECK(folder || mode != ShardVerify::always, "data.verify: always, but no ", kPrepManifestFile,
                 " names the shard '", file, "' (it is not in a data prep output folder); set data.verify: auto");
    if (!folder) continue;
    auto it = manifests.find(*folder);
    if (it == manifests.end()) it = manifests.emplace(*folder, read_manifest(*folder)).first;
    Manifest& m = it->second;
    const fs::path path = fs::absolute(file).lexically_normal();
    const std::string relative = path.lexically_relative(m.folder).generic_string();
    const auto expected = m.sha256.find(relative);
    FATHOM_CHECK(expected != m.sha256.end() || mode != ShardVerify::always, "data.verify: always, but ",
                 m.folder / kPrepManifestFile, " does not name the shard '", file, "'");
    if (expected == m.sha256.end()) continue;
    const FileState state = state_of(path);
    const auto seen = m.verified.find(relative);
    const bool known_good = mode == ShardVerify::automatic && seen != m.verified.end() && seen->second.first == state &&
                            seen->second.second == expected->second;
    if (!known_good) jobs.push_back({&m, relative, path, state});
  }
  if (jobs.empty()) return;

  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  ThreadPool pool(int(std::min<size_t>(jobs.size(), cores)));
  std::vector<std::future<std::string>> digests;
  for (const Job& job : jobs) digests.push_back(pool.submit([path = job.path] { return sha256_file(path); }));
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Job& job = jobs[i];
    const std::string digest = digests[i].get();
    const std::string& expected = job.manifest->sha256.at(job.file);
    FATHOM_CHECK(digest == expected, "shard ", job.path, " does not match ", job.manifest->folder / kPrepManifestFile,
                 ": its SHA-256 is ", digest, ", the manifest records ", expected,
                 "; the file changed after data prep: run `fathom data prep` again (or set data.verify: never "
                 "to train on it as it is)");
    job.manifest->verified[job.file] = {job.state, digest};
  }
  if (mode == ShardVerify::automatic)
    for (const auto& [folder, m] : manifests) save_verified(m);
}

}  // namespace fathom
