// safetensors I/O (https://github.com/huggingface/safetensors): an 8-byte little-endian header
// length N, N bytes of JSON header {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__":
// {string: string}} padded with spaces, then the raw little-endian tensor bytes, offsets counted
// from the end of the header. Files written here load in HF transformers / the safetensors library
// (tensors packed back to back in the given order); files from there load here.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace fathom {

class ReadOnlyFile;

// Named tensors in a fixed order; names are unique.
using TensorMap = std::vector<std::pair<std::string, Tensor>>;

// The largest header this reader accepts (the safetensors library's own limit).
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

// Writes the tensors (copied to the host where needed) and the metadata atomically: a temporary
// file, fsync, rename. Throws before writing anything for duplicate, empty or reserved names and
// undefined tensors.
void write_safetensors(const std::string& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata = {});

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0;  // byte range within the data section
  uint64_t end = 0;
};

// An opened, fully validated safetensors file. The header is checked on open (bounded size, a JSON
// object, known dtypes, shapes of non-negative integers, offsets inside the file that match the
// shapes and do not overlap, unique names); tensors are read on demand.
class SafetensorsFile {
 public:
  const std::string& path() const { return path_; }
  // In file order (ascending data offset).
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  std::vector<std::string> names() const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(const std::string& name) const { return index_.count(name) > 0; }
  // Throws naming the file and the tensor if there is none of that name.
  const SafetensorsEntry& entry(const std::string& name) const;
  // A new CPU tensor holding the stored bytes.
  Tensor load(const std::string& name) const;
  TensorMap load_all() const;

 private:
  friend SafetensorsFile read_safetensors(const std::string& path);
  Tensor load_entry(const SafetensorsEntry& entry) const;

  std::string path_;
  std::shared_ptr<const ReadOnlyFile> file_;
  uint64_t data_start_ = 0;  // 8 + header length
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// Opens and validates; every problem is a fathom::Error naming the file and the tensor or field.
SafetensorsFile read_safetensors(const std::string& path);
// Every tensor of the file, in file order.
TensorMap load_all(const std::string& path);

}  // namespace fathom
