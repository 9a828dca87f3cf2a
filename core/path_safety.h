// The one rule every command that replaces or removes a folder follows (train --overwrite, export
// --overwrite, data prep): a folder may be replaced only when doing so cannot delete what the
// command reads, nor the folder the user works in.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

namespace fathom {

// Refuses (fathom::Error naming both paths) to replace `target` when it
//   - is, or contains, the current working folder;
//   - is, or contains, any of `sources` (what the command reads: its recipe, data, checkpoint...);
//   - lies inside a source folder (replacing it would delete part of that source).
// Paths are compared after resolving symlinks and "..", so another spelling of the same folder is
// caught too. `what` names the operation for the message, e.g. "train --overwrite".
void check_safe_to_replace(const std::filesystem::path& target, const std::vector<std::filesystem::path>& sources,
                           const std::string& what);

// True when `inner` is `outer` or lies below it; both are taken as they are (no resolution).
bool is_same_or_inside(const std::filesystem::path& inner, const std::filesystem::path& outer);

}  // namespace fathom
