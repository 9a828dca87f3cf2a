// core/path_safety.h: the one rule for every command that replaces a folder.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/path_safety.h"
#include "tests/support/test_support.h"

using namespace fathom;
using fathom::testing::expect_error;
using fathom::testing::ScratchFolder;
namespace fs = std::filesystem;

namespace {
// Runs the test body with the current folder set to `dir`, restoring it afterwards.
struct InFolder {
  explicit InFolder(const fs::path& dir) : previous(fs::current_path()) { fs::current_path(dir); }
  ~InFolder() { fs::current_path(previous); }
  fs::path previous;
};
}  // namespace

TEST(PathSafety, RefusesTheCurrentFolderAndItsParents) {
  ScratchFolder dir;
  fs::create_directories(dir / "work" / "sub");
  InFolder cwd(dir / "work" / "sub");
  expect_error([] { check_safe_to_replace(".", {}, "train --overwrite"); },
               {"train --overwrite", "refusing to replace", "current folder"});
  expect_error([&] { check_safe_to_replace("..", {}, "export"); }, {"current folder"});
  expect_error([&] { check_safe_to_replace(dir.path(), {}, "export"); }, {"current folder"});
  expect_error([&] { check_safe_to_replace("./", {}, "export"); }, {"current folder"});
  check_safe_to_replace("elsewhere", {}, "export");  // inside the current folder: fine
  check_safe_to_replace(dir / "other", {}, "export");
}

TEST(PathSafety, RefusesWhatContainsOrLiesInsideASource) {
  ScratchFolder dir;
  fs::create_directories(dir / "run" / "checkpoints");
  fathom::testing::write_bytes(dir / "data.txt", "x");
  expect_error([&] { check_safe_to_replace(dir / "run", {dir / "run"}, "export"); }, {"which this command reads"});
  expect_error([&] { check_safe_to_replace(dir / "run" / "hf", {dir / "run"}, "export"); }, {"lies inside"});
  expect_error([&] { check_safe_to_replace(dir.path(), {dir / "data.txt"}, "train --overwrite"); },
               {"data.txt", "which this command reads"});
  // Another spelling of the same folder, through ".." or a symlink, is the same folder.
  expect_error([&] { check_safe_to_replace(dir / "run" / ".." / "run", {dir / "run" / "checkpoints"}, "export"); },
               {"which this command reads"});
  fs::create_directory_symlink(dir / "run", dir / "link");
  expect_error([&] { check_safe_to_replace(dir / "link", {dir / "run"}, "export"); }, {"which this command reads"});
  // Siblings are fine, even with a shared name prefix.
  check_safe_to_replace(dir / "run2", {dir / "run", dir / "data.txt"}, "export");
}

TEST(PathSafety, SameOrInsideComparesWholeComponents) {
  EXPECT_TRUE(is_same_or_inside("/a/b", "/a/b"));
  EXPECT_TRUE(is_same_or_inside("/a/b/c", "/a/b"));
  EXPECT_TRUE(is_same_or_inside("/a/b/c", "/"));
  EXPECT_FALSE(is_same_or_inside("/a/bc", "/a/b"));
  EXPECT_FALSE(is_same_or_inside("/a", "/a/b"));
}
