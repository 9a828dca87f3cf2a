#include "core/path_safety.h"

#include "core/error.h"

namespace fathom {

namespace fs = std::filesystem;

namespace {

// The absolute path with symlinks and ".." resolved as far as the path exists.
fs::path resolved(const fs::path& path) {
  std::error_code error;
  const fs::path absolute = fs::absolute(path, error);
  FATHOM_CHECK(!error, "cannot make ", path, " an absolute path: ", error.message());
  fs::path real = fs::weakly_canonical(absolute, error);
  if (error) real = absolute.lexically_normal();
  // "a/b/" and "a/b" are one folder.
  if (!real.has_filename() && real.has_parent_path() && real != real.root_path()) real = real.parent_path();
  return real;
}

}  // namespace

bool is_same_or_inside(const fs::path& inner, const fs::path& outer) {
  auto i = inner.begin();
  for (auto o = outer.begin(); o != outer.end(); ++o, ++i) {
    if (o->empty()) continue;  // a trailing separator
    if (i == inner.end() || *i != *o) return false;
  }
  return true;
}

void check_safe_to_replace(const fs::path& target, const std::vector<fs::path>& sources, const std::string& what) {
  const fs::path folder = resolved(target);
  std::error_code error;
  const fs::path cwd = fs::current_path(error);
  FATHOM_CHECK(!error, what, ": cannot read the current folder: ", error.message());
  FATHOM_CHECK(!is_same_or_inside(resolved(cwd), folder), what, ": refusing to replace ", target,
               ": it is or contains the current folder ", cwd, "; choose another folder");
  for (const fs::path& source : sources) {
    if (source.empty()) continue;
    const fs::path real = resolved(source);
    FATHOM_CHECK(!is_same_or_inside(real, folder), what, ": refusing to replace ", target, ": it is or contains ",
                 source, ", which this command reads; choose another folder");
    FATHOM_CHECK(!is_same_or_inside(folder, real), what, ": refusing to replace ", target, ": it lies inside ", source,
                 ", which this command reads; choose a folder outside it");
  }
}

}  // namespace fathom
