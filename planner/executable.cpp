#include "planner/executable.h"

namespace oomb::planner {

bool executable(const simulator::Config& c, std::string* why) {
  if (!c.checkpointing) {
    if (why)
      *why = "checkpointing off (keep every layer's activations) is planned on paper only: the executor always "
             "recomputes each layer from its checkpoint; re-plan with --checkpointing true to run it";
    return false;
  }
  if (why) why->clear();
  return true;
}

}  // namespace oomb::planner
