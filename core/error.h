// Errors a user can act on: FATHOM_CHECK throws fathom::Error with the message and file:line.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace fathom {

class Error : public std::runtime_error {
 public:
  Error(const std::string& message, const char* file, int line);
  // The message alone, without the source location (for user-facing output).
  const std::string& message() const { return message_; }
  const std::string& where() const { return where_; }

 private:
  std::string message_;
  std::string where_;
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream out;
  ((out << args), ...);
  return out.str();
}
[[noreturn]] void fail(const char* file, int line, const std::string& message);
}  // namespace detail

}  // namespace fathom

#define FATHOM_CHECK(cond, ...)                                                                     \
  do {                                                                                              \
    if (!(cond)) ::fathom::detail::fail(__FILE__, __LINE__, ::fathom::detail::concat(__VA_ARGS__)); \
  } while (0)

#define FATHOM_FAIL(...) ::fathom::detail::fail(__FILE__, __LINE__, ::fathom::detail::concat(__VA_ARGS__))
