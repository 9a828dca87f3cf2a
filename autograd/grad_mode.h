// Whether ops record the graph. `NoGrad` turns recording off for a scope (evaluation, optimizer).
#pragma once

namespace fathom {

class GradMode {
 public:
  static bool enabled();
  static void set_enabled(bool enabled);
};

// Sets a thread-local mode (a class with static enabled / set_enabled) to kValue for a scope and
// restores the previous value when the scope ends.
template <class Mode, bool kValue>
class ScopedMode {
 public:
  ScopedMode() : previous_(Mode::enabled()) { Mode::set_enabled(kValue); }
  ~ScopedMode() { Mode::set_enabled(previous_); }
  ScopedMode(const ScopedMode&) = delete;
  ScopedMode& operator=(const ScopedMode&) = delete;

 private:
  bool previous_;
};

using NoGrad = ScopedMode<GradMode, false>;
// Turns recording on for a scope, e.g. inside a node's backward that re-runs a forward (checkpoint).
using EnableGrad = ScopedMode<GradMode, true>;

}  // namespace fathom
