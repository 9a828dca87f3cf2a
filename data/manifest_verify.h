// Shard integrity: `fathom data prep` records every shard's SHA-256 in its manifest.json; a run
// checks the shards it opens against it (recipe key data.verify), so a shard damaged or replaced
// after prep is an error naming it instead of silently different training data.
//   auto    shards named in a manifest are hashed once per file state: a shard whose size and
//           modification time match an earlier successful check (recorded in ".fathom-verified"
//           next to the manifest, best effort: a read-only data folder just re-checks) is skipped;
//   always  every shard is hashed on every start, and a shard that no manifest names is an error;
//   never   no check.
// A shard's manifest is the manifest.json of the prep output it lies in (DIR/train/x.bin or
// DIR/validation/<domain>/x.bin -> DIR/manifest.json). Hashing runs on several threads.
#pragma once
#include <string>
#include <vector>

namespace fathom {

enum class ShardVerify { automatic, always, never };

// "auto", "always" or "never"; anything else is an error naming data.verify.
ShardVerify parse_shard_verify(const std::string& mode);

// Checks the ".bin" files among `files` as `mode` says; the first mismatch is an error naming the
// shard, its manifest and both digests.
void verify_shards(const std::vector<std::string>& files, ShardVerify mode);

}  // namespace fathom
