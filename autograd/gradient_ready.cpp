#include "autograd/gradient_ready.h"

namespace fathom {

namespace {
thread_local GradientListener* listener = nullptr;
}  // namespace

ListenToGradients::ListenToGradients(GradientListener& l) : previous_(listener) { listener = &l; }
ListenToGradients::~ListenToGradients() { listener = previous_; }

GradientListener* current_gradient_listener() { return listener; }

}  // namespace fathom
