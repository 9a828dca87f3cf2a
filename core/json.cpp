#include "core/json.h"

#include <charconv>
#include <cmath>
#include <system_error>

#include "core/error.h"
#include "core/json_reader.h"

namespace fathom {

namespace {

// Length of the UTF-8 sequence starting at text[i], or 0 if it is not a valid one (bad lead
// byte, missing continuation, overlong form, surrogate, beyond U+10FFFF).
size_t utf8_sequence_length(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  size_t length;
  uint32_t code;
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2, code = lead & 0x1fu;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3, code = lead & 0x0fu;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4, code = lead & 0x07u;
  } else {
    return 0;  // continuation byte, overlong 2-byte lead (c0, c1) or beyond U+10FFFF (f5..ff)
  }
  if (i + length > text.size()) return 0;
  for (size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xc0u) != 0x80u) return 0;
    code = (code << 6) | (byte(i + k) & 0x3fu);
  }
  const uint32_t smallest[] = {0, 0, 0x80, 0x800, 0x10000};
  if (code < smallest[length] || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return 0;
  return length;
}

}  // namespace

std::string json_quote(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out += '"';
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      const size_t length = utf8_sequence_length(text, i);
      // Only the valid prefix goes into the message, so the message itself stays valid text.
      FATHOM_CHECK(length > 0, "cannot write a JSON string: invalid UTF-8 byte 0x", std::hex, int(c), std::dec,
                   " at byte ", i, i <= 64 ? " after \"" + std::string(text.substr(0, i)) + "\"" : std::string());
      out.append(text.substr(i, length));
      i += length;
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          static const char hex[] = "0123456789abcdef";
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 0xf];
        } else {
          out += char(c);
        }
    }
    ++i;
  }
  out += '"';
  return out;
}

std::string json_number(double value) {
  FATHOM_CHECK(std::isfinite(value), "cannot write ", value, " as JSON: JSON has no NaN or infinity");
  char buffer[64];
  // Shortest form that parses back to the same double (the round-trip guarantee of to_chars).
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  FATHOM_CHECK(ec == std::errc(), "cannot format ", value, " as a JSON number");
  std::string text(buffer, end);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

JsonWriter& JsonWriter::begin_object() {
  before_value("an object");
  out_ += '{';
  scopes_.push_back(Scope::object_expect_key);
  scope_has_items_.push_back(false);
  return *this;
}

JsonWriter& JsonWriter::end_object() {
  FATHOM_CHECK(!scopes_.empty() && scopes_.back() != Scope::array, "JSON writer: end_object() outside an object");
  FATHOM_CHECK(scopes_.back() == Scope::object_expect_key,
               "JSON writer: end_object() right after a key that has no value yet");
  out_ += '}';
  scopes_.pop_back();
  scope_has_items_.pop_back();
  return finish_value("");
}

JsonWriter& JsonWriter::begin_array() {
  before_value("an array");
  out_ += '[';
  scopes_.push_back(Scope::array);
  scope_has_items_.push_back(false);
  return *this;
}

JsonWriter& JsonWriter::end_array() {
  FATHOM_CHECK(!scopes_.empty() && scopes_.back() == Scope::array, "JSON writer: end_array() outside an array");
  out_ += ']';
  scopes_.pop_back();
  scope_has_items_.pop_back();
  return finish_value("");
}

JsonWriter& JsonWriter::key(std::string_view name) {
  FATHOM_CHECK(!scopes_.empty() && scopes_.back() != Scope::array, "JSON writer: key \"", name, "\" outside an object");
  FATHOM_CHECK(scopes_.back() == Scope::object_expect_key, "JSON writer: key \"", name,
               "\" follows a key that has no value yet");
  if (scope_has_items_.back()) out_ += ',';
  out_ += json_quote(name);
  out_ += ':';
  scopes_.back() = Scope::object_expect_value;
  return *this;
}

JsonWriter& JsonWriter::value(std::string_view text) {
  before_value("a string");
  return finish_value(json_quote(text));
}

JsonWriter& JsonWriter::value(bool flag) {
  before_value("a bool");
  return finish_value(flag ? "true" : "false");
}

JsonWriter& JsonWriter::value(double number) {
  before_value("a number");
  return finish_value(json_number(number));
}

JsonWriter& JsonWriter::number_or_null(double number) { return std::isfinite(number) ? value(number) : null(); }

JsonWriter& JsonWriter::null() {
  before_value("null");
  return finish_value("null");
}

void JsonWriter::before_value(const char* what) {
  FATHOM_CHECK(!done_, "JSON writer: ", what, " after the document's single top-level value");
  if (scopes_.empty()) return;
  FATHOM_CHECK(scopes_.back() != Scope::object_expect_key, "JSON writer: ", what,
               " inside an object needs a key() first");
  if (scopes_.back() == Scope::array && scope_has_items_.back()) out_ += ',';
}

// Appends a finished value (nothing when a container just closed) and moves the enclosing scope on.
JsonWriter& JsonWriter::finish_value(std::string_view text) {
  out_ += text;
  if (scopes_.empty()) {
    done_ = true;
  } else {
    if (scopes_.back() == Scope::object_expect_value) scopes_.back() = Scope::object_expect_key;
    scope_has_items_.back() = true;
  }
  return *this;
}

const std::string& JsonWriter::str() const {
  FATHOM_CHECK(done_, scopes_.empty() ? "JSON writer: nothing was written"
                                      : "JSON writer: the document still has an open object or array");
  return out_;
}

namespace {

// The strict reader's tree as yaml-cpp nodes, tagged as yaml-cpp's own parser would tag them.
YAML::Node to_yaml_node(const JsonValue& value) {
  switch (value.kind()) {
    case JsonValue::Kind::null:
      return YAML::Node(YAML::NodeType::Null);
    case JsonValue::Kind::boolean:
    case JsonValue::Kind::number: {
      YAML::Node node(value.kind() == JsonValue::Kind::number ? value.text() : value.boolean() ? "true" : "false");
      node.SetTag("?");
      return node;
    }
    case JsonValue::Kind::string: {
      YAML::Node node(value.text());
      node.SetTag("!");
      return node;
    }
    case JsonValue::Kind::array: {
      YAML::Node node(YAML::NodeType::Sequence);
      for (const JsonValue& item : value.items()) node.push_back(to_yaml_node(item));
      return node;
    }
    case JsonValue::Kind::object: {
      YAML::Node node(YAML::NodeType::Map);
      // The reader already refused duplicate keys, so appending keeps file order without a lookup per key.
      for (size_t i = 0; i < value.keys().size(); ++i)
        node.force_insert(value.keys()[i], to_yaml_node(value.items()[i]));
      return node;
    }
  }
  FATHOM_FAIL("unknown JSON value kind");
}

}  // namespace

YAML::Node parse_json(const std::string& text, const std::string& source_name) {
  return to_yaml_node(read_json(text, source_name));
}

bool json_integer(const YAML::Node& node, int64_t& out) {
  if (!node.IsScalar() || node.Tag() == "!") return false;
  const std::string& text = node.Scalar();
  if (text.empty()) return false;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  const auto [end, ec] = std::from_chars(first, last, out);
  return ec == std::errc() && end == last;
}

}  // namespace fathom
