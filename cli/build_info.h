#pragma once
#include <string>

namespace oomb::cli {
// "oomb 0.1.0 (commit abc123) features: cuda=no cupti=no nccl=no gui=yes" (cuda, cupti, nccl: yes|no|emulated)
std::string version_string();
std::string git_commit();  // the commit this binary was built from ("unknown" outside a git checkout)
bool built_with_cuda();
bool built_with_emulated_cuda();  // the CUDA backend runs on the emulated device (OOMB_CUDA=EMULATED)
bool built_with_cupti();
bool built_with_gui();
bool built_with_mpi();  // data-parallel runs under mpirun (executor/mpi)
}  // namespace oomb::cli
