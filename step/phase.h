#pragma once
// Where buffers live (tiers), when they live (the phases of a step) and the layer passes of the
// chunk-recurrent schedule: one vocabulary for the buffer table, the simulator and the executor.
#include <cstdint>
#include <string>
#include <vector>

namespace oomb {
enum class Op : uint8_t;  // core/op.h (declared here so that this header includes nothing of ours)
}

namespace oomb::step {

enum class Schedule;  // step/config.h (this header stays light: CUDA translation units include it)

enum class Tier { device, host };
const char* to_string(Tier t);  // "device", "host"

// The phases of one step in which buffers live (docs/model.md). oomb: stage 1 layer forward
// (fill), stage 2 forward recompute, loss, layer backward, optimizer step; standard: forward,
// loss, backward, optimizer.
enum class Phase : uint8_t { fill, recompute, loss, backward, optimizer, forward };
inline constexpr int kPhaseCount = 6;
const char* to_string(Phase p);
Phase phase_from_string(const std::string& s, const std::string& where);  // throws oomb::Error
using PhaseMask = uint32_t;                                                // bit i = Phase i
constexpr PhaseMask phase_bit(Phase p) { return PhaseMask{1} << static_cast<unsigned>(p); }
std::vector<Phase> phases_of(Schedule s);  // in step order
PhaseMask all_phases(Schedule s);          // the mask of phases_of(s)
std::vector<std::string> phase_names(PhaseMask m);  // in step order (forward before loss)

// The layer passes of the oomb schedule (docs/schedule.md): stage 1 fill, stage 2 forward
// recompute, stage 2 backward.
enum class PassKind { fill, recompute, backward };
Op pass_op(PassKind k);  // Op::layer_fwd, layer_recompute, layer_bwd (the trace's ops)

}  // namespace oomb::step
