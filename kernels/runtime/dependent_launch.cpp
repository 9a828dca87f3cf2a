#include "kernels/runtime/dependent_launch.h"

namespace fathom {

namespace {
constinit KernelChoice<Toggle> choice_in_force("FATHOM_DEPENDENT_LAUNCH", Toggle::on, parse_toggle);
}  // namespace

Toggle dependent_launch() { return choice_in_force.get(); }

void set_dependent_launch(Toggle choice) { choice_in_force.set(choice); }

}  // namespace fathom
