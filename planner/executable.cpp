#include "planner/executable.h"

#include "step/capability.h"

namespace oomb::planner {

bool executable(const models::ModelSpec& m, const step::Config& c, std::string* why) {
  // Plans are for a GPU: the CUDA backend's table (on the CPU backend the published preset's table
  // is the executor's own, but a plan of it stays on paper).
  step::Target gpu;
  gpu.backend = step::BackendKind::cuda;
  const step::Capability cap = step::capability(m, c, gpu);
  if (why)
    *why = cap.executable() ? std::string()
           : cap.key == "model" ? cap.reason + " (" + m.id + ": no setting makes it run)"
                                : cap.reason + "; re-plan with settings the executor runs";
  return cap.executable();
}

}  // namespace oomb::planner
