// `fathom data prep` through the real binary: a good run prints its summary and writes the output;
// a bad --validation argument fails with the message on stderr and writes nothing.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "cli_test_helpers.h"
#include "data/prep.h"
#include "tests/support/test_support.h"

namespace fs = std::filesystem;
using fathom::testing::read_bytes;
using fathom::testing::run_fathom;
using fathom::testing::write_bytes;

TEST(DataCli, PrepWritesShardsAndManifestAndPrintsASummary) {
  fathom::testing::ScratchFolder dir;
  write_bytes(dir / "a.txt", "first document\nsecond document\n");
  write_bytes(dir / "b.txt", "third\n");
  write_bytes(dir / "v.txt", "held out\n");
  const fs::path out = dir / "prepared";
  const int status = run_fathom(dir, "data prep --tokenizer bytes --out " + out.string() + " --train " +
                                         (dir / "a.txt").string() + " " + (dir / "b.txt").string() +
                                         " --validation held=" + (dir / "v.txt").string() + " --threads 2");
  EXPECT_EQ(status, 0) << read_bytes(dir / "err.txt");
  const std::string summary = read_bytes(dir / "out.txt");
  EXPECT_NE(summary.find("3 documents"), std::string::npos) << summary;
  EXPECT_NE(summary.find("validation/held"), std::string::npos) << summary;
  EXPECT_NE(summary.find("MB/s"), std::string::npos) << summary;
  EXPECT_NE(read_bytes(dir / "err.txt").find("100%"), std::string::npos) << "progress goes to stderr";
  EXPECT_TRUE(fs::exists(out / fathom::kPrepManifestFile));
  EXPECT_TRUE(fs::exists(out / "train" / "shard_00000.bin"));
  EXPECT_TRUE(fs::exists(out / "validation" / "held" / "shard_00000.bin"));
}

TEST(DataCli, BadValidationArgumentFailsWithItsMessageAndNoOutput) {
  fathom::testing::ScratchFolder dir;
  write_bytes(dir / "a.txt", "a document\n");
  const fs::path out = dir / "prepared";
  const int status = run_fathom(dir, "data prep --tokenizer bytes --out " + out.string() + " --train " +
                                         (dir / "a.txt").string() + " --validation no_equals_sign");
  EXPECT_EQ(status, 1);
  const std::string err = read_bytes(dir / "err.txt");
  EXPECT_NE(err.find("--validation 'no_equals_sign': expected NAME=FILE"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(out));
}
