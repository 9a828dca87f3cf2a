// Token shard files: a fixed 64-byte little-endian header, then the tokens as uint16 (vocab <= 65536)
// or uint32. Header layout (byte offsets):
//    0  magic "FATHOMTK"        8  u32 version (1)       12  u32 token width in bytes (2 or 4)
//   16  u64 token count        24  u32 vocab size        28  u32 CRC-32 of the header (this field as 0)
//   32  reserved, all zero
// Every token is < vocab size; open_shard checks this once, so readers never see a bad id.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace fathom {

inline constexpr size_t kShardHeaderBytes = 64;
inline constexpr uint32_t kShardVersion = 1;
inline constexpr char kShardMagic[8] = {'F', 'A', 'T', 'H', 'O', 'M', 'T', 'K'};

// Token width the writer picks for a vocabulary: 2 bytes when every id fits in uint16, else 4.
uint32_t shard_token_width(uint32_t vocab_size);

// Writes `tokens` to path + ".tmp", fsyncs and renames it over `path`, so `path` is either absent,
// the old file, or the complete new one. Any token >= vocab_size is an error before anything is written.
void write_shard(const std::string& path, std::span<const uint32_t> tokens, uint32_t vocab_size);

// A validated, read-only memory map of one shard. Move-only; unmaps on destruction.
class TokenShard {
 public:
  TokenShard(TokenShard&& other) noexcept;
  TokenShard& operator=(TokenShard&& other) noexcept;
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;
  ~TokenShard();

  size_t size() const { return count_; }
  uint32_t vocab_size() const { return vocab_size_; }
  uint32_t token_width() const { return width_; }
  const std::string& path() const { return path_; }

  // Token i (unchecked, like std::vector::operator[]).
  uint32_t operator[](size_t i) const {
    return width_ == 2 ? uint32_t(static_cast<const uint16_t*>(tokens_)[i]) : static_cast<const uint32_t*>(tokens_)[i];
  }
  // Token i; an index past the end is an error naming the file.
  uint32_t at(size_t i) const;
  // Copies tokens [start, start + out.size()) into out; the range must lie inside the shard.
  void read(size_t start, std::span<uint32_t> out) const;

 private:
  friend TokenShard open_shard(const std::string& path);
  TokenShard() = default;
  void release();

  std::string path_;
  void* map_ = nullptr;  // the whole file
  size_t map_bytes_ = 0;
  const void* tokens_ = nullptr;  // map_ + kShardHeaderBytes
  size_t count_ = 0;
  uint32_t width_ = 0;
  uint32_t vocab_size_ = 0;
};

// Maps and validates a shard: readable file, magic, version, width, header CRC, exact file size,
// and every token < vocab size. Each failure is an error naming the file and what is wrong.
TokenShard open_shard(const std::string& path);

}  // namespace fathom
