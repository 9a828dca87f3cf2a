// "Did you mean ...?" for names a user typed: edit distance and the closest known name.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fathom {

// Optimal string alignment distance (insertions, deletions, substitutions and swaps of two
// adjacent characters each cost 1), ignoring ASCII case: "Lerning_rate" is 1 from "learning_rate".
std::size_t edit_distance(std::string_view a, std::string_view b);

// The largest distance at which a suggestion still helps rather than confuses: a third of the
// typed name, at least 2 (1 for names of up to 3 characters).
std::size_t suggestion_threshold(std::string_view typed);

// The candidate closest to `typed` (the first one on ties), if within suggestion_threshold(typed).
std::optional<std::string> closest_name(std::string_view typed, const std::vector<std::string>& candidates);

// The index of `name` in `names`; anything else is an error "<what> must be one of a, b; got 'x'" with
// the closest name as a suggestion (the recipe's enum choices).
std::size_t choice_index(const std::string& name, const std::vector<std::string>& names, std::string_view what);

// "a, b, c": for messages that list the valid choices.
std::string join_names(const std::vector<std::string>& names, std::string_view separator = ", ");

}  // namespace fathom
