// The one JSON reader: strict (RFC 8259: no comments, trailing commas, raw control characters or
// duplicate keys) and fast (a 10 MB tokenizer.json in tens of milliseconds, UTF-16 surrogate pairs
// joined). Tokenizer files, safetensors headers and, through core/json.h's parse_json, config.json,
// state.json and metrics lines all go through it; yaml-cpp's parser, slow and prone to hangs on
// malformed input, reads no JSON.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fathom {

class JsonValue {
 public:
  enum class Kind : uint8_t { null, boolean, number, string, array, object };

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::null; }
  bool is_string() const { return kind_ == Kind::string; }
  bool is_array() const { return kind_ == Kind::array; }
  bool is_object() const { return kind_ == Kind::object; }
  bool is_boolean() const { return kind_ == Kind::boolean; }
  // "a string", "an object", ... for error messages.
  const char* kind_name() const;

  // A string's decoded bytes (escapes resolved, UTF-8), or a number's literal text.
  const std::string& text() const { return text_; }
  bool boolean() const { return boolean_; }
  // A number that is a plain integer (no fraction or exponent) within int64; nullopt otherwise.
  std::optional<int64_t> integer() const;

  // An array's elements, or an object's values (in file order, keys() alongside).
  const std::vector<JsonValue>& items() const { return items_; }
  const std::vector<std::string>& keys() const { return keys_; }
  // An object's member by key (nullptr when absent or when this is not an object).
  const JsonValue* find(std::string_view key) const;

 private:
  friend class JsonParser;
  Kind kind_ = Kind::null;
  bool boolean_ = false;
  std::string text_;
  std::vector<JsonValue> items_;
  std::vector<std::string> keys_;
};

// Parses exactly one JSON document. Failures (syntax, duplicate object keys, trailing content)
// are fathom::Error naming source_name with the line and column.
JsonValue read_json(std::string_view text, const std::string& source_name);

}  // namespace fathom
