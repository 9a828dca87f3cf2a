#include "data/shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <utility>
#include <vector>

#include "core/error.h"
#include "data/crc32.h"

namespace fathom {

// Tokens are written and mapped in host order; the format is little-endian.
static_assert(std::endian::native == std::endian::little, "token shards assume a little-endian host");

namespace {

constexpr size_t kVersionAt = 8, kWidthAt = 12, kCountAt = 16, kVocabAt = 24, kCrcAt = 28, kReservedAt = 32;

void put_u32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
void put_u64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
uint32_t get_u32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(p[i]) << (8 * i);
  return v;
}
uint64_t get_u64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

// CRC of the header with its CRC field taken as zero.
uint32_t header_crc(const unsigned char* header) {
  unsigned char copy[kShardHeaderBytes];
  std::memcpy(copy, header, kShardHeaderBytes);
  put_u32(copy + kCrcAt, 0);
  return crc32(copy, kShardHeaderBytes);
}

// Index of the first token >= limit, or count if none. A branch-free max pass first keeps the
// common all-valid case at memory speed; only a bad shard pays for the search.
template <typename T>
size_t first_at_or_above(const T* tokens, size_t count, uint32_t limit) {
  uint32_t max_token = 0;
  for (size_t i = 0; i < count; ++i) max_token = std::max<uint32_t>(max_token, tokens[i]);
  if (max_token < limit) return count;
  for (size_t i = 0; i < count; ++i)
    if (tokens[i] >= limit) return i;
  return count;
}

std::string errno_text() { return std::strerror(errno); }

// Writes all of [data, data + size), retrying short writes and interruptions.
void write_all(int fd, const void* data, size_t size, const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    FATHOM_CHECK(n > 0, "cannot write token shard ", path, ": ", errno_text());
    p += n;
    size -= size_t(n);
  }
}

// Removes the temporary file unless the write completed (so a failure leaves nothing behind).
struct TempFileGuard {
  std::string path;
  int fd = -1;
  bool done = false;
  ~TempFileGuard() {
    if (fd >= 0) ::close(fd);
    if (!done) ::unlink(path.c_str());
  }
};

void fsync_parent_dir(const std::string& path) {
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) parent = ".";
  const int dir = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return;  // the data itself is already durable; the rename's durability is best effort
  ::fsync(dir);
  ::close(dir);
}

}  // namespace

uint32_t shard_token_width(uint32_t vocab_size) { return vocab_size <= 65536u ? 2u : 4u; }

void write_shard(const std::string& path, std::span<const uint32_t> tokens, uint32_t vocab_size) {
  FATHOM_CHECK(vocab_size > 0, "cannot write token shard ", path, ": vocab size must be positive");
  for (size_t i = 0; i < tokens.size(); ++i) {
    FATHOM_CHECK(tokens[i] < vocab_size, "cannot write token shard ", path, ": token ", tokens[i], " at position ", i,
                 " is not below the vocab size ", vocab_size);
  }
  const uint32_t width = shard_token_width(vocab_size);

  unsigned char header[kShardHeaderBytes] = {};
  std::memcpy(header, kShardMagic, sizeof(kShardMagic));
  put_u32(header + kVersionAt, kShardVersion);
  put_u32(header + kWidthAt, width);
  put_u64(header + kCountAt, tokens.size());
  put_u32(header + kVocabAt, vocab_size);
  put_u32(header + kCrcAt, header_crc(header));

  TempFileGuard tmp{path + ".tmp"};
  tmp.fd = ::open(tmp.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  FATHOM_CHECK(tmp.fd >= 0, "cannot create token shard ", tmp.path, ": ", errno_text());
  write_all(tmp.fd, header, sizeof(header), tmp.path);
  if (width == 4) {
    write_all(tmp.fd, tokens.data(), tokens.size_bytes(), tmp.path);
  } else {
    // Narrow to uint16 in bounded chunks rather than copying the whole token array.
    constexpr size_t kChunk = size_t(1) << 20;
    std::vector<uint16_t> narrow(std::min(tokens.size(), kChunk));
    for (size_t start = 0; start < tokens.size(); start += kChunk) {
      const size_t n = std::min(kChunk, tokens.size() - start);
      for (size_t i = 0; i < n; ++i) narrow[i] = static_cast<uint16_t>(tokens[start + i]);
      write_all(tmp.fd, narrow.data(), n * sizeof(uint16_t), tmp.path);
    }
  }
  FATHOM_CHECK(::fsync(tmp.fd) == 0, "cannot flush token shard ", tmp.path, ": ", errno_text());
  const int closed = ::close(tmp.fd);
  tmp.fd = -1;
  FATHOM_CHECK(closed == 0, "cannot close token shard ", tmp.path, ": ", errno_text());
  FATHOM_CHECK(::rename(tmp.path.c_str(), path.c_str()) == 0, "cannot rename ", tmp.path, " to ", path, ": ",
               errno_text());
  tmp.done = true;
  fsync_parent_dir(path);
}

TokenShard::TokenShard(TokenShard&& other) noexcept { *this = std::move(other); }

TokenShard& TokenShard::operator=(TokenShard&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    tokens_ = std::exchange(other.tokens_, nullptr);
    count_ = std::exchange(other.count_, 0);
    width_ = std::exchange(other.width_, 0);
    vocab_size_ = std::exchange(other.vocab_size_, 0);
  }
  return *this;
}

TokenShard::~TokenShard() { release(); }

void TokenShard::release() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  tokens_ = nullptr;
}

uint32_t TokenShard::at(size_t i) const {
  FATHOM_CHECK(i < count_, "token index ", i, " is out of range for shard ", path_, " with ", count_, " tokens");
  return (*this)[i];
}

void TokenShard::read(size_t start, std::span<uint32_t> out) const {
  FATHOM_CHECK(start <= count_ && out.size() <= count_ - start, "token range [", start, ", ", start + out.size(),
               ") is out of range for shard ", path_, " with ", count_, " tokens");
  if (width_ == 4) {
    std::memcpy(out.data(), static_cast<const uint32_t*>(tokens_) + start, out.size_bytes());
  } else {
    const uint16_t* src = static_cast<const uint16_t*>(tokens_) + start;
    for (size_t i = 0; i < out.size(); ++i) out[i] = src[i];
  }
}

TokenShard open_shard(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  FATHOM_CHECK(fd >= 0, "cannot open token shard ", path, ": ", errno_text());
  struct stat st {};
  const int stat_rc = ::fstat(fd, &st);
  if (stat_rc != 0 || !S_ISREG(st.st_mode)) {
    const std::string why = stat_rc != 0 ? errno_text() : "not a regular file";
    ::close(fd);
    FATHOM_FAIL("cannot read token shard ", path, ": ", why);
  }
  const uint64_t file_bytes = uint64_t(st.st_size);
  if (file_bytes < kShardHeaderBytes) {
    ::close(fd);
    FATHOM_FAIL("token shard ", path, " is truncated: ", file_bytes, " bytes cannot hold the ", kShardHeaderBytes,
                "-byte header");
  }
  void* map = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  const std::string map_error = map == MAP_FAILED ? errno_text() : "";
  ::close(fd);  // the mapping keeps the file alive
  FATHOM_CHECK(map != MAP_FAILED, "cannot memory-map token shard ", path, ": ", map_error);

  TokenShard shard;  // owns the map from here on, so every failure below unmaps it
  shard.path_ = path;
  shard.map_ = map;
  shard.map_bytes_ = file_bytes;

  const auto* header = static_cast<const unsigned char*>(map);
  FATHOM_CHECK(std::memcmp(header, kShardMagic, sizeof(kShardMagic)) == 0, "file ", path,
               " is not a token shard: it does not start with the magic \"FATHOMTK\"");
  const uint32_t version = get_u32(header + kVersionAt);
  FATHOM_CHECK(version == kShardVersion, "token shard ", path, " has version ", version, "; this build reads version ",
               kShardVersion);
  const uint32_t stored_crc = get_u32(header + kCrcAt);
  const uint32_t actual_crc = header_crc(header);
  FATHOM_CHECK(stored_crc == actual_crc, "token shard ", path, " has a corrupted header: CRC-32 is ", actual_crc,
               " but the header records ", stored_crc);
  const uint32_t width = get_u32(header + kWidthAt);
  FATHOM_CHECK(width == 2 || width == 4, "token shard ", path, " has token width ", width,
               " bytes; only 2 and 4 are valid");
  const bool reserved_zero =
      std::all_of(header + kReservedAt, header + kShardHeaderBytes, [](unsigned char b) { return b == 0; });
  FATHOM_CHECK(reserved_zero, "token shard ", path, " has non-zero reserved header bytes (32..63)");
  const uint32_t vocab_size = get_u32(header + kVocabAt);
  FATHOM_CHECK(vocab_size > 0, "token shard ", path, " records a vocab size of 0");
  const uint64_t count = get_u64(header + kCountAt);
  FATHOM_CHECK(count <= (std::numeric_limits<uint64_t>::max() - kShardHeaderBytes) / width, "token shard ", path,
               " records an impossible token count ", count);
  const uint64_t expected_bytes = kShardHeaderBytes + count * width;
  FATHOM_CHECK(file_bytes == expected_bytes, "token shard ", path, " should be ", expected_bytes, " bytes (", count,
               " tokens of ", width, " bytes after the header) but is ", file_bytes, " bytes",
               file_bytes < expected_bytes ? " (truncated)" : " (trailing bytes)");

  shard.tokens_ = header + kShardHeaderBytes;
  shard.count_ = count;
  shard.width_ = width;
  shard.vocab_size_ = vocab_size;
  const size_t bad = width == 2 ? first_at_or_above(static_cast<const uint16_t*>(shard.tokens_), count, vocab_size)
                                : first_at_or_above(static_cast<const uint32_t*>(shard.tokens_), count, vocab_size);
  FATHOM_CHECK(bad == count, "token shard ", path, " has token ", bad < count ? shard[bad] : 0, " at position ", bad,
               ", not below its vocab size ", vocab_size);
  return shard;
}

}  // namespace fathom
