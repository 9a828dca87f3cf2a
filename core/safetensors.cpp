#include "core/safetensors.h"

#include <algorithm>
#include <bit>
#include <optional>
#include <set>

#include "core/file_io.h"
#include "core/json.h"
#include "core/json_reader.h"

namespace fathom {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; fathom writes host memory as is");

namespace {

constexpr const char* kMetadataKey = "__metadata__";

std::string describe_file(const std::string& path) { return "safetensors file '" + path + "'"; }

std::string header_json(const TensorMap& tensors, const std::map<std::string, std::string>& metadata) {
  JsonWriter json;
  json.begin_object();
  if (!metadata.empty()) {
    json.key(kMetadataKey).begin_object();
    for (const auto& [key, value] : metadata) json.key(key).value(value);
    json.end_object();
  }
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    json.key(name).begin_object();
    json.key("dtype").value(dtype_name(tensor.dtype()));
    json.key("shape").begin_array();
    for (int64_t d : tensor.shape().vec()) json.value(d);
    json.end_array();
    json.key("data_offsets").begin_array().value(offset).value(offset + tensor.nbytes()).end_array();
    json.end_object();
    offset += tensor.nbytes();
  }
  json.end_object();
  return json.str();
}

// A JSON value as text for error messages, whatever its kind.
std::string show(const JsonValue& value) {
  switch (value.kind()) {
    case JsonValue::Kind::string:
      return "\"" + value.text() + "\"";
    case JsonValue::Kind::number:
      return value.text();
    case JsonValue::Kind::boolean:
      return value.boolean() ? "true" : "false";
    default:
      return value.kind_name();
  }
}

// Reads field[i] of a JSON array as a non-negative integer.
uint64_t non_negative_integer(const JsonValue& item, const std::string& context, const char* field, size_t i) {
  const std::optional<int64_t> value = item.integer();
  FATHOM_CHECK(value && *value >= 0, context, ": ", field, "[", i, "] is ", show(item), ", not a non-negative integer");
  return uint64_t(*value);
}

SafetensorsEntry parse_entry(const std::string& where, const std::string& name, const JsonValue& node,
                             uint64_t data_bytes) {
  const std::string context = where + ": tensor '" + name + "'";
  FATHOM_CHECK(node.is_object(), context, ": the entry is ", show(node),
               ", expected an object with dtype, shape and data_offsets");
  SafetensorsEntry entry;
  entry.name = name;

  const JsonValue* dtype = node.find("dtype");
  FATHOM_CHECK(dtype, context, ": missing field 'dtype'");
  FATHOM_CHECK(dtype->is_string(), context, ": 'dtype' is ", show(*dtype), ", not a string");
  try {
    entry.dtype = dtype_from_name(dtype->text());
  } catch (const Error& e) {
    FATHOM_FAIL(context, ": ", e.message());
  }

  const JsonValue* shape_value = node.find("shape");
  FATHOM_CHECK(shape_value, context, ": missing field 'shape'");
  FATHOM_CHECK(shape_value->is_array(), context, ": 'shape' is ", show(*shape_value), ", not an array");
  const std::vector<JsonValue>& shape = shape_value->items();
  FATHOM_CHECK(shape.size() <= size_t(Shape::kMaxRank), context, ": 'shape' has ", shape.size(),
               " dimensions, fathom supports at most ", Shape::kMaxRank);
  std::vector<int64_t> dims;
  uint64_t bytes = dtype_size(entry.dtype);
  for (size_t i = 0; i < shape.size(); ++i) {
    const uint64_t d = non_negative_integer(shape[i], context, "shape", i);
    dims.push_back(int64_t(d));
    FATHOM_CHECK(!__builtin_mul_overflow(bytes, d, &bytes) && bytes <= uint64_t(INT64_MAX), context,
                 ": 'shape' is too large (its byte size overflows)");
  }
  entry.shape = Shape(dims);

  const JsonValue* offsets = node.find("data_offsets");
  FATHOM_CHECK(offsets, context, ": missing field 'data_offsets'");
  FATHOM_CHECK(offsets->is_array() && offsets->items().size() == 2, context, ": 'data_offsets' is ", show(*offsets),
               ", expected [begin, end]");
  entry.begin = non_negative_integer(offsets->items()[0], context, "data_offsets", 0);
  entry.end = non_negative_integer(offsets->items()[1], context, "data_offsets", 1);
  // Appended rather than "[" + ...: GCC 12 -O3 gives a false -Wrestrict on the prepend.
  const std::string range =
      std::string("[").append(std::to_string(entry.begin)).append(", ").append(std::to_string(entry.end)).append("]");
  FATHOM_CHECK(entry.begin <= entry.end, context, ": data_offsets ", range, " end before they begin");
  FATHOM_CHECK(entry.end <= data_bytes, context, ": data_offsets ", range, " reach beyond the ", data_bytes,
               "-byte data section (truncated file?)");
  FATHOM_CHECK(entry.end - entry.begin == bytes, context, ": data_offsets ", range, " hold ", entry.end - entry.begin,
               " bytes, but ", dtype_name(entry.dtype), entry.shape.str(), " needs ", bytes);
  return entry;
}

// The reader has already refused duplicate keys, here as in the tensor names.
std::map<std::string, std::string> parse_metadata(const std::string& where, const JsonValue& node) {
  FATHOM_CHECK(node.is_object(), where, ": '__metadata__' is ", show(node), ", expected an object of strings");
  std::map<std::string, std::string> metadata;
  for (size_t i = 0; i < node.keys().size(); ++i) {
    const std::string& key = node.keys()[i];
    const JsonValue& value = node.items()[i];
    FATHOM_CHECK(value.is_string(), where, ": '__metadata__' value of '", key, "' is ", show(value), ", not a string");
    metadata.emplace(key, value.text());
  }
  return metadata;
}

}  // namespace

void write_safetensors(const std::string& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string where = describe_file(path);
  std::set<std::string_view> names;
  for (const auto& [name, tensor] : tensors) {
    FATHOM_CHECK(!name.empty(), "cannot write ", where, ": a tensor has an empty name");
    FATHOM_CHECK(name != kMetadataKey, "cannot write ", where, ": '", kMetadataKey,
                 "' is reserved and cannot name a tensor");
    FATHOM_CHECK(names.insert(name).second, "cannot write ", where, ": tensor name '", name, "' appears twice");
    FATHOM_CHECK(tensor.defined(), "cannot write ", where, ": tensor '", name, "' is undefined");
  }
  std::string header = header_json(tensors, metadata);
  header.append((8 - header.size() % 8) % 8, ' ');  // keeps the data section 8-byte aligned

  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(uint64_t(header.size()) >> (8 * i));
  AtomicFileWriter out(path);
  out.write(length, sizeof(length));
  out.write(header);
  for (const auto& [name, tensor] : tensors) {
    const Tensor host = tensor.to(Device::cpu());
    out.write(host.raw(), host.nbytes());
  }
  out.commit();
}

SafetensorsFile read_safetensors(const std::string& path) {
  const std::string where = describe_file(path);
  SafetensorsFile result;
  result.path_ = path;
  auto file = std::make_shared<const ReadOnlyFile>(path);
  const uint64_t size = file->size();
  FATHOM_CHECK(size >= 8, where, " is ", size,
               " bytes, too short for the 8-byte header length (truncated, or not a safetensors file)");
  unsigned char length_bytes[8];
  file->read_at(0, length_bytes, 8);
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | length_bytes[i];
  FATHOM_CHECK(header_bytes <= kSafetensorsMaxHeaderBytes, where, ": header length ", header_bytes,
               " exceeds the limit of ", kSafetensorsMaxHeaderBytes, " bytes (corrupt, or not a safetensors file)");
  FATHOM_CHECK(header_bytes <= size - 8, where, ": header length ", header_bytes, " is larger than the ", size - 8,
               " bytes that follow it (truncated file?)");

  std::string header(header_bytes, '\0');
  file->read_at(8, header.data(), header.size());
  FATHOM_CHECK(!header.empty() && header.front() == '{', where,
               ": the header does not start with '{' (it must be a JSON object)");
  const JsonValue root = read_json(header, where + " header");
  FATHOM_CHECK(root.is_object(), where, ": the header is not a JSON object");

  const uint64_t data_bytes = size - 8 - header_bytes;
  for (size_t i = 0; i < root.keys().size(); ++i) {
    const std::string& name = root.keys()[i];
    if (name == kMetadataKey) {
      result.metadata_ = parse_metadata(where, root.items()[i]);
      continue;
    }
    result.index_.emplace(name, 0);
    result.entries_.push_back(parse_entry(where, name, root.items()[i], data_bytes));
  }

  std::stable_sort(result.entries_.begin(), result.entries_.end(),
                   [](const auto& a, const auto& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  // Sorted by begin, a range overlaps an earlier one exactly when it starts before the furthest end
  // seen so far. Empty tensors own no bytes and overlap nothing.
  const SafetensorsEntry* furthest = nullptr;
  for (size_t i = 0; i < result.entries_.size(); ++i) {
    const SafetensorsEntry& entry = result.entries_[i];
    result.index_[entry.name] = i;
    if (entry.begin == entry.end) continue;
    FATHOM_CHECK(furthest == nullptr || entry.begin >= furthest->end, where, ": tensors '", furthest->name, "' [",
                 furthest->begin, ", ", furthest->end, ") and '", entry.name, "' [", entry.begin, ", ", entry.end,
                 ") overlap in the data section");
    if (furthest == nullptr || entry.end > furthest->end) furthest = &entry;
  }
  result.data_start_ = 8 + header_bytes;
  result.file_ = std::move(file);
  return result;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> names;
  names.reserve(entries_.size());
  for (const auto& entry : entries_) names.push_back(entry.name);
  return names;
}

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  const auto it = index_.find(name);
  FATHOM_CHECK(it != index_.end(), describe_file(path_), " has no tensor '", name, "'");
  return entries_[it->second];
}

Tensor SafetensorsFile::load(const std::string& name) const { return load_entry(entry(name)); }

TensorMap SafetensorsFile::load_all() const {
  TensorMap tensors;
  tensors.reserve(entries_.size());
  for (const auto& entry : entries_) tensors.emplace_back(entry.name, load_entry(entry));
  return tensors;
}

Tensor SafetensorsFile::load_entry(const SafetensorsEntry& entry) const {
  Tensor tensor = Tensor::empty(entry.shape, entry.dtype);
  try {
    if (tensor.nbytes() > 0) file_->read_at(data_start_ + entry.begin, tensor.raw(), tensor.nbytes());
  } catch (const Error& e) {
    FATHOM_FAIL(describe_file(path_), ": cannot load tensor '", entry.name, "': ", e.message());
  }
  return tensor;
}

TensorMap load_all(const std::string& path) { return read_safetensors(path).load_all(); }

}  // namespace fathom
