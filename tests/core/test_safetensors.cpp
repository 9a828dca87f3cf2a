#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/json.h"
#include "core/safetensors.h"
#include "tests/support/test_support.h"

using namespace fathom;
using fathom::testing::expect_error;
using fathom::testing::read_bytes;
using fathom::testing::ScratchFolder;
using fathom::testing::write_bytes;

namespace {

const DType kAllDTypes[] = {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i32, DType::i64, DType::u8};

// A tensor of random bytes: every bit pattern must survive, NaN payloads included.
Tensor random_tensor(const Shape& shape, DType dtype, std::mt19937_64& rng) {
  Tensor t = Tensor::empty(shape, dtype);
  auto* bytes = static_cast<unsigned char*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) bytes[i] = static_cast<unsigned char>(rng());
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = char(v >> (8 * i));
  return s;
}

// A file from a header text and a data section.
std::string file_bytes(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

}  // namespace

TEST(Safetensors, RoundTripEveryDtypeAndRank) {
  ScratchFolder dir;
  std::mt19937_64 rng(1234);
  TensorMap tensors;
  for (DType dtype : kAllDTypes) {
    for (int rank = 0; rank <= 4; ++rank) {
      std::vector<int64_t> dims;
      for (int i = 0; i < rank; ++i) dims.push_back(int64_t(1 + rng() % 4));
      const std::string name = std::string("layers.") + dtype_name(dtype) + ".rank" + std::to_string(rank) + ".weight";
      tensors.emplace_back(name, random_tensor(Shape(dims), dtype, rng));
    }
    // Empty tensors of rank 1 and 3 sit between non-empty ones.
    tensors.emplace_back(std::string("empty1.") + dtype_name(dtype), random_tensor({0}, dtype, rng));
    tensors.emplace_back(std::string("empty3.") + dtype_name(dtype), random_tensor({2, 0, 3}, dtype, rng));
  }
  std::shuffle(tensors.begin(), tensors.end(), rng);  // the file keeps the caller's order, whatever it is
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "caf\xc3\xa9 \"quoted\"\n"}};
  const std::string path = (dir / "all.safetensors").string();
  write_safetensors(path, tensors, metadata);

  const SafetensorsFile file = read_safetensors(path);
  EXPECT_EQ(file.metadata(), metadata);
  ASSERT_EQ(file.entries().size(), tensors.size());
  const TensorMap loaded = file.load_all();
  ASSERT_EQ(loaded.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    // Empty tensors share an offset with a neighbour, so compare by name rather than position.
    const auto& [name, original] = tensors[i];
    ASSERT_TRUE(file.contains(name)) << name;
    EXPECT_EQ(file.entry(name).dtype, original.dtype()) << name;
    EXPECT_EQ(file.entry(name).shape, original.shape()) << name;
    EXPECT_TRUE(same_bytes(file.load(name), original)) << name;
    if (original.numel() > 0) {  // non-empty tensors come back in the written order
      EXPECT_EQ(loaded[i].first, name);
      EXPECT_TRUE(same_bytes(loaded[i].second, original)) << name;
    }
  }
  EXPECT_EQ(load_all(path).size(), tensors.size());
}

TEST(Safetensors, EmptyFileAndScalarRoundTrip) {
  ScratchFolder dir;
  const std::string empty = (dir / "empty.safetensors").string();
  write_safetensors(empty, {});
  EXPECT_TRUE(read_safetensors(empty).entries().empty());
  EXPECT_TRUE(read_safetensors(empty).metadata().empty());
  EXPECT_EQ(read_bytes(empty).size() % 8, 0u);

  std::mt19937_64 rng(5);
  const std::string scalar = (dir / "scalar.safetensors").string();
  const Tensor value = Tensor::from_vector<double>({std::ldexp(double(rng() % 1000 + 1), -7)}, Shape{});
  write_safetensors(scalar, {{"loss_scale", value}});
  const Tensor back = read_safetensors(scalar).load("loss_scale");
  EXPECT_EQ(back.rank(), 0);
  EXPECT_EQ(back.item(), value.item());
}

TEST(Safetensors, HeaderIsStandardAndAligned) {
  ScratchFolder dir;
  std::mt19937_64 rng(99);
  const TensorMap tensors = {{"model.embed_tokens.weight", random_tensor({3, 2}, DType::f32, rng)},
                             {"model.norm.weight", random_tensor({3}, DType::bf16, rng)},
                             {"step", random_tensor({}, DType::i64, rng)}};
  const std::string path = (dir / "m.safetensors").string();
  write_safetensors(path, tensors, {{"format", "pt"}});
  const std::string bytes = read_bytes(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + 24 + 6 + 8);
  const std::string header = bytes.substr(8, n);
  const std::string expected = R"({"__metadata__":{"format":"pt"},)"
                               R"("model.embed_tokens.weight":{"dtype":"F32","shape":[3,2],"data_offsets":[0,24]},)"
                               R"("model.norm.weight":{"dtype":"BF16","shape":[3],"data_offsets":[24,30]},)"
                               R"("step":{"dtype":"I64","shape":[],"data_offsets":[30,38]}})";
  EXPECT_EQ(header.substr(0, expected.size()), expected);
  EXPECT_EQ(header.find_first_not_of(' ', expected.size()), std::string::npos) << "padding must be spaces";
  const YAML::Node json = parse_json(header, "header");
  EXPECT_EQ(json["model.norm.weight"]["data_offsets"][1].as<int>(), 30);
  // The data section is the tensors' bytes back to back.
  EXPECT_EQ(std::memcmp(bytes.data() + 8 + n, tensors[0].second.raw(), 24), 0);
  EXPECT_EQ(std::memcmp(bytes.data() + 8 + n + 24, tensors[1].second.raw(), 6), 0);
  EXPECT_EQ(std::memcmp(bytes.data() + 8 + n + 30, tensors[2].second.raw(), 8), 0);
}

TEST(Safetensors, ReadsAHandBuiltFile) {
  // As another writer might produce it: pretty-printed, unpadded header, keys out of offset order,
  // a gap in the data section.
  const std::string header =
      "{\n  \"b\": {\"dtype\": \"I32\", \"shape\": [2], \"data_offsets\": [8, 16]},\n"
      "  \"__metadata__\": {\"format\": \"pt\"},\n"
      "  \"a\": {\"dtype\": \"F16\", \"shape\": [], \"data_offsets\": [0, 2]},\n"
      "  \"z\": {\"dtype\": \"U8\", \"shape\": [0, 5], \"data_offsets\": [16, 16]}\n}";
  std::mt19937 rng(3);
  const int32_t b0 = int32_t(rng()), b1 = int32_t(rng());
  const float a = float(rng() % 1000) / 8;  // exactly representable in f16
  const f16 a_half = float_to_f16(a);
  std::string data(16, '\xee');
  std::memcpy(&data[0], &a_half.bits, 2);
  std::memcpy(&data[8], &b0, 4);
  std::memcpy(&data[12], &b1, 4);
  ScratchFolder dir;
  const auto path = dir / "hand.safetensors";
  write_bytes(path, file_bytes(header, data));

  const SafetensorsFile file = read_safetensors(path.string());
  EXPECT_EQ(file.names(), (std::vector<std::string>{"a", "b", "z"}));
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.load("a").rank(), 0);
  EXPECT_EQ(f16_to_float(file.load("a").data<f16>()[0]), a);
  EXPECT_EQ(file.load("b").to_vector<int32_t>(), (std::vector<int32_t>{b0, b1}));
  EXPECT_EQ(file.load("z").shape(), Shape({0, 5}));
  expect_error([&] { file.load("missing"); }, {"hand.safetensors", "no tensor 'missing'"});
}

TEST(Safetensors, WriterRejectsBadInputWithoutLeavingFiles) {
  ScratchFolder dir;
  std::mt19937_64 rng(8);
  const Tensor t = random_tensor({2}, DType::f32, rng);
  const std::string path = (dir / "bad.safetensors").string();
  expect_error([&] { write_safetensors(path, {{"w", t}, {"w", t}}); }, {"bad.safetensors", "'w' appears twice"});
  expect_error([&] { write_safetensors(path, {{"__metadata__", t}}); }, {"reserved"});
  expect_error([&] { write_safetensors(path, {{"", t}}); }, {"empty name"});
  expect_error([&] { write_safetensors(path, {{"w", Tensor()}}); }, {"'w' is undefined"});
  expect_error([&] { write_safetensors(path, {{"bad\xff", t}}); }, {"invalid UTF-8"});
  expect_error(
      [&] {
        write_safetensors((dir / "no/such/folder/x.safetensors").string(), {{"w", t}});
      },
      {"cannot write", "x.safetensors"});
  EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << "a failed write left a file behind";
}

TEST(Safetensors, OverwriteIsAtomicReplace) {
  ScratchFolder dir;
  std::mt19937_64 rng(4);
  const std::string path = (dir / "x.safetensors").string();
  write_safetensors(path, {{"a", random_tensor({4}, DType::f32, rng)}});
  const Tensor second = random_tensor({2, 2}, DType::bf16, rng);
  write_safetensors(path, {{"b", second}});
  const SafetensorsFile file = read_safetensors(path);
  EXPECT_EQ(file.names(), std::vector<std::string>{"b"});
  EXPECT_TRUE(same_bytes(file.load("b"), second));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);
}

TEST(Safetensors, CorruptFilesAreClearErrors) {
  ScratchFolder dir;
  const auto path = dir / "corrupt.safetensors";
  const auto entry = [](const std::string& dtype, const std::string& shape, const std::string& offsets) {
    return "{\"dtype\":" + dtype + ",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}";
  };
  const std::string data(64, '\x5a');
  struct Case {
    std::string what;
    std::string bytes;
    std::vector<std::string> fragments;
  };
  const std::vector<Case> cases = {
      {"empty file", "", {"0 bytes, too short"}},
      {"shorter than the length field", std::string("\x10\x00\x00", 3), {"3 bytes, too short"}},
      {"header length beyond the file", le64(100) + "{}", {"header length 100 is larger than the 2 bytes"}},
      {"huge header length", le64(uint64_t(1) << 62) + "{}", {"exceeds the limit"}},
      {"header length just over 100 MB", le64(100'000'001) + "{}", {"exceeds the limit"}},
      {"empty header", file_bytes("", ""), {"does not start with '{'"}},
      {"invalid JSON", file_bytes("{\"a\": {\"dtype\": ", ""), {"invalid JSON", "line 1"}},
      {"array header", file_bytes("[1, 2]", ""), {"does not start with '{'"}},
      {"not a map after all", file_bytes("{} {}", ""), {"invalid JSON"}},
      // Found by fuzzing (tests/fuzz/findings): a form feed where '{' belongs made yaml-cpp spin.
      {"raw control byte",
       file_bytes("{\"s\":{\"dtype\":\"F16\"},\"e\":\x0c\"dtype\":\"F16\"}", ""),
       {"invalid JSON at line 1, column 26", "found control byte 0x0c"}},
      {"control byte in a name",
       file_bytes("{\"a\x01"
                  "b\":{}}",
                  ""),
       {"column 4", "found control byte 0x01"}},
      {"key not a string", file_bytes("{w: 3}", ""), {"invalid JSON at line 1, column 2", "expected a string key"}},
      {"entry not an object", file_bytes("{\"w\": 3}", data), {"tensor 'w'", "expected an object"}},
      {"unknown dtype",
       file_bytes("{\"w\":" + entry("\"F8_E8M0\"", "[1]", "[0,1]") + "}", data),
       {"tensor 'w'", "unsupported dtype 'F8_E8M0'"}},
      {"bool dtype",
       file_bytes("{\"w\":" + entry("\"BOOL\"", "[1]", "[0,1]") + "}", data),
       {"tensor 'w'", "unsupported dtype 'BOOL'"}},
      {"dtype not a string",
       file_bytes("{\"w\":" + entry("7", "[1]", "[0,1]") + "}", data),
       {"tensor 'w'", "'dtype' is 7, not a string"}},
      {"missing dtype", file_bytes(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", data), {"missing field 'dtype'"}},
      {"missing shape", file_bytes(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", data), {"missing field 'shape'"}},
      {"missing offsets", file_bytes(R"({"w":{"dtype":"F32","shape":[1]}})", data), {"missing field 'data_offsets'"}},
      {"negative shape",
       file_bytes("{\"w\":" + entry("\"F32\"", "[2,-1]", "[0,8]") + "}", data),
       {"tensor 'w'", "shape[1] is -1, not a non-negative integer"}},
      {"fractional shape", file_bytes("{\"w\":" + entry("\"F32\"", "[1.5]", "[0,4]") + "}", data), {"shape[0] is 1.5"}},
      {"quoted shape", file_bytes("{\"w\":" + entry("\"F32\"", "[\"2\"]", "[0,8]") + "}", data), {"shape[0] is \"2\""}},
      {"shape not an array",
       file_bytes("{\"w\":" + entry("\"F32\"", "4", "[0,16]") + "}", data),
       {"'shape' is 4, not an array"}},
      {"rank 9", file_bytes("{\"w\":" + entry("\"U8\"", "[1,1,1,1,1,1,1,1,1]", "[0,1]") + "}", data), {"9 dimensions"}},
      {"overflowing shape",
       file_bytes("{\"w\":" + entry("\"F64\"", "[4294967296,4294967296]", "[0,8]") + "}", data),
       {"overflows"}},
      {"offsets beyond the data",
       file_bytes("{\"w\":" + entry("\"F32\"", "[20]", "[0,80]") + "}", data),
       {"tensor 'w'", "data_offsets [0, 80] reach beyond the 64-byte data section"}},
      {"offsets not matching the shape",
       file_bytes("{\"w\":" + entry("\"F32\"", "[2,3]", "[0,20]") + "}", data),
       {"tensor 'w'", "hold 20 bytes, but F32[2, 3] needs 24"}},
      {"offsets reversed",
       file_bytes("{\"w\":" + entry("\"U8\"", "[0]", "[8,4]") + "}", data),
       {"end before they begin"}},
      {"offsets of one number",
       file_bytes("{\"w\":" + entry("\"U8\"", "[4]", "[4]") + "}", data),
       {"expected [begin, end]"}},
      {"negative offset",
       file_bytes("{\"w\":" + entry("\"U8\"", "[4]", "[-4,0]") + "}", data),
       {"data_offsets[0] is -4"}},
      {"overlapping ranges",
       file_bytes("{\"a\":" + entry("\"F32\"", "[4]", "[0,16]") + ",\"b\":" + entry("\"F32\"", "[2]", "[12,20]") + "}",
                  data),
       {"'a' [0, 16) and 'b' [12, 20) overlap"}},
      {"range inside another",
       file_bytes("{\"a\":" + entry("\"F32\"", "[8]", "[0,32]") + ",\"b\":" + entry("\"U8\"", "[2]", "[4,6]") +
                      ",\"c\":" + entry("\"U8\"", "[2]", "[20,22]") + "}",
                  data),
       {"overlap"}},
      {"duplicate names",
       file_bytes("{\"w\":" + entry("\"F32\"", "[1]", "[0,4]") + ",\"w\":" + entry("\"F32\"", "[1]", "[4,8]") + "}",
                  data),
       {"duplicate object key \"w\""}},
      {"metadata not strings",
       file_bytes(R"({"__metadata__":{"format":1}})", ""),
       {"'__metadata__' value of 'format' is 1, not a string"}},
      {"metadata not an object", file_bytes(R"({"__metadata__":"pt"})", ""), {"'__metadata__' is \"pt\""}},
      {"deeply nested", file_bytes("{\"w\":" + std::string(50000, '[') + "}", ""), {"invalid JSON"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    write_bytes(path, c.bytes);
    std::vector<std::string> fragments = c.fragments;
    fragments.push_back(path.string());  // every error names the file
    try {
      read_safetensors(path.string());
      ADD_FAILURE() << "expected a fathom::Error";
    } catch (const Error& e) {
      for (const auto& fragment : fragments)
        EXPECT_NE(e.message().find(fragment), std::string::npos) << "'" << fragment << "' not in: " << e.message();
    }
  }
  expect_error([&] { read_safetensors((dir / "missing.safetensors").string()); },
               {"missing.safetensors", "cannot open"});
  expect_error([&] { read_safetensors(dir.path().string()); }, {"not a regular file"});
}

TEST(Safetensors, TruncatedFilesAreClearErrors) {
  ScratchFolder dir;
  std::mt19937_64 rng(21);
  const auto path = dir / "t.safetensors";
  write_safetensors(path.string(),
                    {{"a", random_tensor({5, 3}, DType::f32, rng)}, {"b", random_tensor({7}, DType::bf16, rng)}});
  const std::string full = read_bytes(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(full[i]);
  // Cut inside the data, right after the header, inside the header, inside the length.
  for (size_t cut : {full.size() - 1, full.size() - 14, size_t(8 + n), size_t(8 + n / 2), size_t(5)}) {
    SCOPED_TRACE(cut);
    write_bytes(path, full.substr(0, cut));
    EXPECT_THROW(read_safetensors(path.string()), Error);
  }
  write_bytes(path, full.substr(0, full.size() - 1));
  expect_error([&] { read_safetensors(path.string()); }, {"t.safetensors", "tensor 'b'", "truncated file?"});

  // A file cut short after it was opened fails on load, naming the tensor.
  write_bytes(path, full);
  const SafetensorsFile file = read_safetensors(path.string());
  std::filesystem::resize_file(path, full.size() - 4);
  expect_error([&] { file.load("b"); }, {"t.safetensors", "cannot load tensor 'b'", "truncated?"});
  EXPECT_EQ(file.load("a").numel(), 15);
}

TEST(Safetensors, ReadsAFileWrittenByTheSafetensorsLibrary) {
  // Written by safetensors.torch.save_file (tests/fixtures/make_safetensors_from_torch.py), whose
  // header orders tensors by dtype alignment, not by name; values follow the script's formula.
  const std::string path = std::string(FATHOM_SOURCE_DIR) + "/tests/fixtures/safetensors_from_torch.safetensors";
  const SafetensorsFile file = read_safetensors(path);
  EXPECT_EQ(file.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"by", "torch"}}));
  const std::vector<std::vector<int64_t>> shapes = {{}, {3, 2}, {2, 1, 3, 2}, {0, 4}};
  ASSERT_EQ(file.entries().size(), std::size(kAllDTypes) * shapes.size());
  int j = 0;
  for (DType dtype : kAllDTypes) {
    for (const auto& dims : shapes) {
      const std::string name = std::string("t").append(std::to_string(j)).append(".").append(dtype_name(dtype));
      Tensor expected = Tensor::empty(Shape(dims), DType::f64);
      for (int64_t i = 0; i < expected.numel(); ++i) {
        const int64_t k = (7 * i + 3 * j) % 200;
        expected.data<double>()[i] = dtype == DType::u8   ? double(k)
                                     : is_floating(dtype) ? double(k - 100) / 4
                                                          : double(k - 100);
      }
      EXPECT_TRUE(same_bytes(file.load(name), expected.to(dtype))) << name;
      ++j;
    }
  }
}

// The header that hung yaml-cpp for minutes under the fuzzer is now refused at once.
TEST(Safetensors, FuzzedControlByteHeaderIsRefusedQuickly) {
  const std::string path = std::string(FATHOM_SOURCE_DIR) + "/tests/fuzz/findings/safetensors_timeout.safetensors";
  expect_error([&] { read_safetensors(path); }, {"control byte"});
}
