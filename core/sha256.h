// SHA-256 (FIPS 180-4), for the checksums data prep records for every shard it writes, so a copy
// of a prepared data set can be verified with `sha256sum`.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace fathom {

// Incremental hashing: update() any number of times, then hex_digest() once.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t bytes);
  void update(std::string_view bytes) { update(bytes.data(), bytes.size()); }
  // The 32-byte digest as 64 lowercase hex digits; the object is finished afterwards.
  std::string hex_digest();

 private:
  void compress(const uint8_t* block);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> block_{};
  size_t block_used_ = 0;
  uint64_t total_bytes_ = 0;
  bool finished_ = false;
};

std::string sha256_hex(std::string_view bytes);
// The digest of a file's contents, read in pieces; an unreadable file is an error naming it.
std::string sha256_file(const std::filesystem::path& path);

}  // namespace fathom
