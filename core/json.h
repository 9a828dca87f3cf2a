// JSON: a small streaming writer (safetensors headers, checkpoint state.json, metrics.jsonl lines)
// and parse_json, the strict reader's result as yaml-cpp nodes.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace fathom {

// "text" as a JSON string literal: quotes, backslashes and control characters escaped, UTF-8
// passed through unchanged. Throws on invalid UTF-8 (the output would not be valid JSON).
std::string json_quote(std::string_view text);
// A double as the shortest JSON number that reads back to exactly the same value; integral
// values keep a ".0" so readers see a float. Throws on NaN and infinities (JSON has none).
std::string json_number(double value);

// Writes one JSON value (usually an object) into a string. The writer checks the structure as it
// goes: keys only inside objects, a value after every key, every container closed.
//   JsonWriter w;
//   w.begin_object().key("step").value(12).key("loss").value(2.5).end_object();
//   w.str() == R"({"step":12,"loss":2.5})"
class JsonWriter {
 public:
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(std::string_view name);

  JsonWriter& value(std::string_view text);
  JsonWriter& value(const char* text) { return value(std::string_view(text)); }
  JsonWriter& value(const std::string& text) { return value(std::string_view(text)); }
  JsonWriter& value(bool flag);
  JsonWriter& value(double number);
  // Every integer type (but bool) prints exactly, with no detour through double.
  template <typename T>
  requires(std::is_integral_v<T> && !std::is_same_v<T, bool>) JsonWriter& value(T number) {
    before_value("a number");
    if constexpr (std::is_signed_v<T>)
      return finish_value(std::to_string(static_cast<long long>(number)));
    else
      return finish_value(std::to_string(static_cast<unsigned long long>(number)));
  }
  JsonWriter& null();
  // A measurement that may not be finite (a diverged loss): the number, or null where JSON has none.
  JsonWriter& number_or_null(double number);

  // The finished document; throws if a container is still open or nothing was written.
  const std::string& str() const;

 private:
  enum class Scope : uint8_t { object_expect_key, object_expect_value, array };
  JsonWriter& finish_value(std::string_view text);
  void before_value(const char* what);

  std::string out_;
  std::vector<Scope> scopes_;
  std::vector<bool> scope_has_items_;
  bool done_ = false;
};

// Parses JSON text (exactly one document) with the strict reader of core/json_reader.h and hands it
// over as yaml-cpp nodes, for callers written against YAML::Node. Failures become fathom::Error
// naming source_name and the line and column. Every scalar is kept as text: Tag() is "!" for
// strings and "?" for numbers and true/false (null is a Null node), which lets callers tell "1" from 1.
YAML::Node parse_json(const std::string& text, const std::string& source_name);

// A parsed scalar as a strict integer: plain (not quoted), decimal digits with an optional '-'.
// Returns false for anything else (1.5, 1e3, "3", overflow).
bool json_integer(const YAML::Node& node, int64_t& out);

}  // namespace fathom
