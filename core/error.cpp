#include "core/error.h"

#include <string_view>

namespace fathom {

namespace {
// Keep the path relative to the source tree: "core/tensor.cpp", not the build machine's path.
std::string short_path(const char* file) {
  std::string_view path(file);
  std::string_view root(FATHOM_SOURCE_DIR);
  if (path.substr(0, root.size()) == root) path.remove_prefix(root.size());
  while (!path.empty() && path.front() == '/') path.remove_prefix(1);
  return std::string(path);
}
}  // namespace

Error::Error(const std::string& message, const char* file, int line)
    : std::runtime_error(message + " [" + short_path(file) + ":" + std::to_string(line) + "]"),
      message_(message),
      where_(short_path(file) + ":" + std::to_string(line)) {}

namespace detail {
void fail(const char* file, int line, const std::string& message) { throw Error(message, file, line); }
}  // namespace detail

}  // namespace fathom
