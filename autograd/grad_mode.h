// Whether ops record the graph. `NoGrad` turns recording off for a scope (evaluation, optimizer).
#pragma once

namespace fathom {

class GradMode {
 public:
  static bool enabled();
  static void set_enabled(bool enabled);
};

class NoGrad {
 public:
  NoGrad() : previous_(GradMode::enabled()) { GradMode::set_enabled(false); }
  ~NoGrad() { GradMode::set_enabled(previous_); }
  NoGrad(const NoGrad&) = delete;
  NoGrad& operator=(const NoGrad&) = delete;

 private:
  bool previous_;
};

// Turns recording on for a scope, e.g. inside a node's backward that re-runs a forward (checkpoint).
class EnableGrad {
 public:
  EnableGrad() : previous_(GradMode::enabled()) { GradMode::set_enabled(true); }
  ~EnableGrad() { GradMode::set_enabled(previous_); }
  EnableGrad(const EnableGrad&) = delete;
  EnableGrad& operator=(const EnableGrad&) = delete;

 private:
  bool previous_;
};

}  // namespace fathom
