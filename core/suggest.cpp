#include "core/suggest.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace fathom {

namespace {
char lower(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }
}  // namespace

std::size_t edit_distance(std::string_view a, std::string_view b) {
  // Rows i-2, i-1 and i of the dynamic programme; the swap rule needs two rows back.
  const std::size_t n = b.size();
  std::vector<std::size_t> before(n + 1), previous(n + 1), current(n + 1);
  for (std::size_t j = 0; j <= n; ++j) previous[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (std::size_t j = 1; j <= n; ++j) {
      const bool same = lower(a[i - 1]) == lower(b[j - 1]);
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (same ? 0 : 1)});
      const bool swapped = i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) && lower(a[i - 2]) == lower(b[j - 1]);
      if (swapped) current[j] = std::min(current[j], before[j - 2] + 1);
    }
    std::swap(before, previous);
    std::swap(previous, current);
  }
  return previous[n];
}

std::size_t suggestion_threshold(std::string_view typed) {
  if (typed.size() <= 3) return 1;  // two edits turn any short name into any other
  return std::max<std::size_t>(2, typed.size() / 3);
}

std::optional<std::string> closest_name(std::string_view typed, const std::vector<std::string>& candidates) {
  std::optional<std::string> best;
  std::size_t best_distance = suggestion_threshold(typed) + 1;
  for (const std::string& candidate : candidates) {
    const std::size_t distance = edit_distance(typed, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  return best;
}

std::string join_names(const std::vector<std::string>& names, std::string_view separator) {
  std::string joined;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) joined += separator;
    joined += names[i];
  }
  return joined;
}

std::size_t choice_index(const std::string& name, const std::vector<std::string>& names, std::string_view what) {
  const auto it = std::find(names.begin(), names.end(), name);
  if (it != names.end()) return std::size_t(it - names.begin());
  const auto closest = closest_name(name, names);
  FATHOM_FAIL(what, " must be one of ", join_names(names), "; got '", name, "'",
              closest ? " (did you mean '" + *closest + "'?)" : std::string());
}

}  // namespace fathom
