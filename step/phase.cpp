#include "step/phase.h"

#include "core/error.h"
#include "core/op.h"
#include "step/config.h"

namespace oomb::step {

namespace {
const char* const kPhaseNames[kPhaseCount] = {"fill", "recompute", "loss", "backward", "optimizer", "forward"};
constexpr Phase kOombPhases[] = {Phase::fill, Phase::recompute, Phase::loss, Phase::backward, Phase::optimizer};
constexpr Phase kStandardPhases[] = {Phase::forward, Phase::loss, Phase::backward, Phase::optimizer};
}  // namespace

const char* to_string(Tier t) { return t == Tier::device ? "device" : "host"; }

const char* to_string(Phase p) { return kPhaseNames[static_cast<int>(p)]; }

Phase phase_from_string(const std::string& s, const std::string& where) {
  for (int i = 0; i < kPhaseCount; ++i)
    if (s == kPhaseNames[i]) return static_cast<Phase>(i);
  throw Error(where, s, "unknown phase", "one of fill, recompute, loss, backward, optimizer, forward");
}

std::vector<Phase> phases_of(Schedule s) {
  if (s == Schedule::oomb) return {std::begin(kOombPhases), std::end(kOombPhases)};
  return {std::begin(kStandardPhases), std::end(kStandardPhases)};
}

PhaseMask all_phases(Schedule s) {
  PhaseMask m = 0;
  if (s == Schedule::oomb) {
    for (Phase p : kOombPhases) m |= phase_bit(p);
  } else {
    for (Phase p : kStandardPhases) m |= phase_bit(p);
  }
  return m;
}

std::vector<std::string> phase_names(PhaseMask m) {
  // Step order of both schedules (fill and recompute never share a mask with forward).
  constexpr Phase kStepOrder[] = {Phase::fill, Phase::recompute, Phase::forward,
                                  Phase::loss, Phase::backward,  Phase::optimizer};
  std::vector<std::string> v;
  for (Phase p : kStepOrder)
    if (m & phase_bit(p)) v.emplace_back(to_string(p));
  return v;
}

Op pass_op(PassKind k) {
  switch (k) {
    case PassKind::fill: return Op::layer_fwd;
    case PassKind::recompute: return Op::layer_recompute;
    case PassKind::backward: return Op::layer_bwd;
  }
  return Op::none;
}

}  // namespace oomb::step
