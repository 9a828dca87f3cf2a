// SHA-256 against the FIPS 180-4 examples and vectors from an independent implementation at the
// padding boundaries (55/56/63/64/65/119/120 bytes), plus incremental and file hashing.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "core/error.h"
#include "core/sha256.h"
#include "tests/support/test_support.h"

using namespace fathom;

namespace {

// Bytes (31 i + 7) mod 256, the pattern the boundary vectors were computed from.
std::string pattern(size_t n) {
  std::string bytes(n, '\0');
  for (size_t i = 0; i < n; ++i) bytes[i] = char((i * 31 + 7) & 0xff);
  return bytes;
}

}  // namespace

TEST(Sha256, FipsExamples) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, PaddingBoundaries) {
  const std::pair<size_t, const char*> vectors[] = {
      {55, "8aa994584139d128848eeebc4e815639ba5ab6e6e39574195a63ac4f14f7c43b"},
      {56, "ad574708f75c044c9b85de64cb568ee7711ff4f36448c6242f053ba8f6cc2b63"},
      {63, "280ed3e8ff1df845b2e7dfe6ac6cee817bef20e783cc65abc41b818b4d2fe076"},
      {64, "c6ab9724ade5b6a7a1edfffb12f3aa9181351355af8fd08c919952ad211339dd"},
      {65, "788367c73c7ddf4c53f65e68cc0d943e6227ab55b0e78ba63ace822b1c6301c0"},
      {119, "3d610547d68216dedf7435a4fb6260353911f6b3fd3f18805ddb8be285d726fe"},
      {120, "1f80156a804cb7862ad113e8200e9d74499723e7c7854d5f48776d3148e09656"},
      {1000, "5097e7d587352f5097062ae679f37bda5802d9f875aba14c8cb4d1a188ada179"},
  };
  for (const auto& [length, digest] : vectors) EXPECT_EQ(sha256_hex(pattern(length)), digest) << length << " bytes";
}

TEST(Sha256, IncrementalUpdatesInRandomPiecesMatchOneShot) {
  std::mt19937 rng(20240611);
  std::string data(5000, '\0');
  for (char& c : data) c = char(rng());
  const std::string expected = sha256_hex(data);
  for (int trial = 0; trial < 20; ++trial) {
    Sha256 hash;
    for (size_t at = 0; at < data.size();) {
      const size_t n = std::min<size_t>(data.size() - at, rng() % 150);
      hash.update(data.data() + at, n);
      at += n;
    }
    EXPECT_EQ(hash.hex_digest(), expected);
  }
}

TEST(Sha256, FileDigestEqualsDigestOfItsBytesAndMissingFileIsAnError) {
  fathom::testing::ScratchFolder dir;
  std::mt19937 rng(7);
  std::string data(3 << 20, '\0');  // several read buffers
  for (char& c : data) c = char(rng());
  fathom::testing::write_bytes(dir / "blob", data);
  EXPECT_EQ(sha256_file(dir / "blob"), sha256_hex(data));
  try {
    sha256_file(dir / "absent");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("absent"), std::string::npos) << e.message();
  }
}

TEST(Sha256, UseAfterDigestIsAnError) {
  Sha256 hash;
  hash.update("abc");
  hash.hex_digest();
  EXPECT_THROW(hash.update("x"), Error);
  EXPECT_THROW(hash.hex_digest(), Error);
}
