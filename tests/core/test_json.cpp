#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json.h"
#include "core/json_reader.h"
#include "tests/support/test_support.h"

using namespace fathom;
using fathom::testing::error_of;
using fathom::testing::expect_error;

TEST(Json, QuoteEscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(json_quote("plain"), "\"plain\"");
  EXPECT_EQ(json_quote("a\"b\\c/d"), "\"a\\\"b\\\\c/d\"");
  EXPECT_EQ(json_quote("\b\f\n\r\t"), "\"\\b\\f\\n\\r\\t\"");
  EXPECT_EQ(json_quote(std::string("\x00\x01\x1f\x7f", 4)), "\"\\u0000\\u0001\\u001f\x7f\"");
  EXPECT_EQ(json_quote(""), "\"\"");
}

TEST(Json, QuotePassesValidUtf8AndRejectsInvalid) {
  const std::string text = "caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf";  // é ✓ 😀 U+10FFFF
  EXPECT_EQ(json_quote(text), "\"" + text + "\"");
  for (const char* bad :
       {"\xff", "ab\xc3", "\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\x80", "\xe2\x9c"}) {
    expect_error([&] { json_quote(bad); }, {"invalid UTF-8"});
  }
}

TEST(Json, RandomStringsRoundTripThroughTheReader) {
  std::mt19937 rng(7);
  const std::vector<std::string> pieces = {"\"",
                                           "\\",
                                           "/",
                                           "\n",
                                           "\t",
                                           "\x01",
                                           "\x1f",
                                           "\x7f",
                                           "a",
                                           "Z",
                                           "0",
                                           " ",
                                           ":",
                                           ",",
                                           "{",
                                           "]",
                                           "\xc3\xa9",
                                           "\xe2\x82\xac",
                                           "\xf0\x9f\x98\x80"};
  for (int trial = 0; trial < 200; ++trial) {
    std::string key, value;
    for (int i = 0, n = int(rng() % 20); i < n; ++i) key += pieces[rng() % pieces.size()];
    for (int i = 0, n = int(rng() % 20); i < n; ++i) value += pieces[rng() % pieces.size()];
    JsonWriter w;
    w.begin_object().key(key).value(value).key("list").begin_array().value(value).end_array().end_object();
    const YAML::Node node = parse_json(w.str(), "trial");
    ASSERT_TRUE(node.IsMap()) << w.str();
    ASSERT_EQ(node.size(), 2u) << w.str();
    auto it = node.begin();
    EXPECT_EQ(it->first.Scalar(), key) << w.str();
    EXPECT_EQ(it->second.Scalar(), value) << w.str();
    EXPECT_EQ(node["list"][0].Scalar(), value) << w.str();
  }
}

TEST(Json, DoublesRoundTripExactly) {
  std::mt19937_64 rng(11);
  std::vector<double> values = {0.1,
                                1.0 / 3,
                                -2.5,
                                1e300,
                                -1e-300,
                                5e-324,
                                std::numeric_limits<double>::max(),
                                std::numeric_limits<double>::min(),
                                123456789.0,
                                0.0,
                                -0.0};
  for (int i = 0; i < 2000; ++i) {
    const uint64_t bits = rng();
    double d;
    std::memcpy(&d, &bits, 8);
    if (std::isfinite(d)) values.push_back(d);
  }
  for (int i = 0; i < 200; ++i) values.push_back(std::ldexp(double(rng() % 1000000) / 1000, int(rng() % 40) - 20));
  for (double d : values) {
    const std::string text = json_number(d);
    const double back = std::strtod(text.c_str(), nullptr);
    EXPECT_EQ(std::memcmp(&back, &d, 8), 0) << text;  // bitwise, so -0.0 keeps its sign
    int64_t ignored;
    EXPECT_FALSE(json_integer(parse_json("[" + text + "]", "number")[0], ignored)) << text << " reads as an integer";
  }
  EXPECT_EQ(json_number(0.1), "0.1");
  EXPECT_EQ(json_number(3.0), "3.0");
  EXPECT_EQ(json_number(-0.0), "-0.0");
  EXPECT_EQ(json_number(1e21), "1e+21");
}

TEST(Json, NanAndInfinityAreErrors) {
  for (double bad : {std::nan(""), std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()}) {
    expect_error([&] { json_number(bad); }, {"NaN or infinity"});
    JsonWriter w;
    w.begin_array();
    EXPECT_THROW(w.value(bad), Error);
  }
}

TEST(Json, IntegersPrintExactly) {
  JsonWriter w;
  w.begin_array()
      .value(std::numeric_limits<int64_t>::min())
      .value(std::numeric_limits<int64_t>::max())
      .value(std::numeric_limits<uint64_t>::max())
      .value(int8_t(-7))
      .value(uint16_t(65535))
      .value(true)
      .value(false)
      .null()
      .end_array();
  EXPECT_EQ(w.str(), "[-9223372036854775808,9223372036854775807,18446744073709551615,-7,65535,true,false,null]");
}

TEST(Json, WriterBuildsNestedDocuments) {
  JsonWriter w;
  w.begin_object()
      .key("step")
      .value(12)
      .key("loss")
      .value(2.5)
      .key("name")
      .value("run \"a\"")
      .key("empty_object")
      .begin_object()
      .end_object()
      .key("empty_array")
      .begin_array()
      .end_array()
      .key("nested")
      .begin_array()
      .begin_object()
      .key("x")
      .begin_array()
      .value(1)
      .value(2)
      .end_array()
      .end_object()
      .value(std::string("s"))
      .end_array()
      .end_object();
  EXPECT_EQ(w.str(), R"({"step":12,"loss":2.5,"name":"run \"a\"","empty_object":{},"empty_array":[],)"
                     R"("nested":[{"x":[1,2]},"s"]})");
  const YAML::Node node = parse_json(w.str(), "doc");
  EXPECT_EQ(node["nested"][0]["x"][1].as<int>(), 2);
  JsonWriter scalar;
  scalar.value(7);
  EXPECT_EQ(scalar.str(), "7");
}

TEST(Json, WriterMisuseIsAnError) {
  expect_error([] { JsonWriter().begin_object().value(1); }, {"needs a key"});
  expect_error([] { JsonWriter().begin_array().key("k"); }, {"outside an object"});
  expect_error([] { JsonWriter().key("k"); }, {"outside an object"});
  expect_error([] { JsonWriter().begin_object().key("a").key("b"); }, {"no value"});
  expect_error([] { JsonWriter().begin_object().key("a").end_object(); }, {"no value"});
  expect_error([] { JsonWriter().begin_object().end_array(); }, {"outside an array"});
  expect_error([] { JsonWriter().begin_array().end_object(); }, {"outside an object"});
  expect_error([] { JsonWriter().end_array(); }, {"outside an array"});
  expect_error([] { JsonWriter().value(1).value(2); }, {"single top-level value"});
  expect_error(
      [] {
        JsonWriter w;
        w.begin_object();
        (void)w.str();
      },
      {"still has an open"});
  expect_error([] { (void)JsonWriter().str(); }, {"nothing was written"});
}

TEST(Json, ParseErrorsNameTheSourceAndLine) {
  expect_error([] { parse_json("{\n\"a\": 1,\n\"b\": [1, 2,\n}\n", "run/state.json"); },
               {"run/state.json", "invalid JSON", "line 4"});
  expect_error([] { parse_json("", "empty.json"); }, {"empty.json", "empty"});
  expect_error([] { parse_json("  \n ", "blank.json"); }, {"blank.json", "empty"});
  expect_error([] { parse_json("{\"a\":1}\n{\"b\":2}", "two.json"); },
               {"two.json", "unexpected content after the JSON value"});
  expect_error([] { parse_json(std::string(100000, '['), "deep.json"); }, {"deep.json", "invalid JSON"});
  const YAML::Node node = parse_json("{\"a\": [1, \"x\\u00e9\\n\"], \"b\": {\"c\": true}}", "ok.json");
  EXPECT_EQ(node["a"][1].Scalar(), "x\xc3\xa9\n");
  EXPECT_TRUE(node["b"]["c"].as<bool>());
}

// parse_json reads with the strict reader: YAML-only syntax that yaml-cpp let through is refused.
TEST(Json, ParseJsonIsStrict) {
  for (const std::string text :
       {"{'a': 1}", "{\"a\": 1,}", "[1, 2] # note", "{a: 1}", "[.inf]", "---\n{}", "[1]\n[2]"}) {
    expect_error([&] { parse_json(text, "cfg.json"); }, {"cfg.json: invalid JSON at line"});
  }
}

TEST(Json, ParseJsonTagsScalarsAndKeepsKeyOrder) {
  const YAML::Node node = parse_json(R"({"z": "7", "a": 7, "m": null, "t": true, "f": false, "l": [], "o": {}})", "t");
  ASSERT_TRUE(node.IsMap());
  std::vector<std::string> keys;
  for (const auto& item : node) keys.push_back(item.first.Scalar());
  EXPECT_EQ(keys, (std::vector<std::string>{"z", "a", "m", "t", "f", "l", "o"}));
  EXPECT_EQ(node["z"].Tag(), "!");
  EXPECT_EQ(node["a"].Tag(), "?");
  EXPECT_EQ(node["a"].as<int>(), 7);
  EXPECT_TRUE(node["m"].IsNull());
  EXPECT_TRUE(node["t"].as<bool>());
  EXPECT_FALSE(node["f"].as<bool>());
  EXPECT_TRUE(node["l"].IsSequence() && node["l"].size() == 0);
  EXPECT_TRUE(node["o"].IsMap() && node["o"].size() == 0);
  EXPECT_FALSE(node["absent"]);
}

TEST(Json, StrictIntegers) {
  const YAML::Node node = parse_json(R"([12, -3, "12", 1.5, 1e3, 99999999999999999999, null, [1], true])", "ints");
  int64_t v = 0;
  EXPECT_TRUE(json_integer(node[0], v));
  EXPECT_EQ(v, 12);
  EXPECT_TRUE(json_integer(node[1], v));
  EXPECT_EQ(v, -3);
  for (size_t i = 2; i < node.size(); ++i) EXPECT_FALSE(json_integer(node[i], v)) << i;
}

TEST(JsonReader, ParsesStrictJson) {
  const JsonValue v =
      read_json(R"( {"a": [1, -2.5e3, true, false, null], "b\u00e9": "x\"\\\/\n\ud83d\udc0b", "c": {}} )", "t");
  ASSERT_TRUE(v.is_object());
  ASSERT_EQ(v.keys().size(), 3u);
  const JsonValue& a = *v.find("a");
  EXPECT_EQ(a.items()[0].integer(), std::optional<int64_t>(1));
  EXPECT_FALSE(a.items()[1].integer().has_value());
  EXPECT_EQ(a.items()[1].text(), "-2.5e3");
  EXPECT_TRUE(a.items()[2].boolean());
  EXPECT_TRUE(a.items()[4].is_null());
  EXPECT_EQ(v.find("b\xC3\xA9")->text(), "x\"\\/\n\xF0\x9F\x90\x8B");  // surrogate pair -> one 4-byte character
  for (const std::string bad :
       {"{", "{\"a\" 1}", "[1,]", "01", "\"\\ud83d\"", "\"a\nb\"", "{\"a\":1,\"a\":2}", "1 2", "nul", "\"\\x\""}) {
    const std::string message = error_of([&] { read_json(bad, "bad.json"); });
    EXPECT_TRUE(message.find("bad.json: invalid JSON at line") != std::string::npos) << bad << ": " << message;
  }
  const std::string deep = std::string(1000, '[') + std::string(1000, ']');
  expect_error([&] { read_json(deep, "deep.json"); }, {"nested deeper"});
}

// Raw control bytes are named in the message, wherever they sit (the fuzzed safetensors header
// had a form feed where a value belongs).
TEST(JsonReader, NamesRawControlBytes) {
  expect_error(
      [] {
        read_json(
            "{\"a\":\x0c"
            "1}",
            "h.json");
      },
      {"h.json: invalid JSON at line 1, column 6: expected a value (found control byte 0x0c)"});
  expect_error([] { read_json("[\"x\x01\"]", "s.json"); }, {"line 1, column 4", "found control byte 0x01"});
  expect_error(
      [] {
        read_json(
            "[1,\x7f"
            "2]",
            "d.json");
      },
      {"found control byte 0x7f"});
  expect_error([] { read_json(" \n ", "blank.json"); },
               {"blank.json: invalid JSON at line 2, column 2: the text is empty"});
}

TEST(Json, NumberOrNullWritesNullWhereJsonHasNoNumber) {
  JsonWriter w;
  w.begin_array()
      .number_or_null(2.5)
      .number_or_null(std::nan(""))
      .number_or_null(-std::numeric_limits<double>::infinity())
      .end_array();
  EXPECT_EQ(w.str(), "[2.5,null,null]");
}
