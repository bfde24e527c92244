#pragma once
// Calibrated device profiles from measurements: what `oomb calibrate --traces`, `--points` and
// `--project-to` write, assembled here so that tests call it and the CLI only parses and prints.
//   fit_profile_to_traces: a profile's efficiencies fitted to measured traces (least squares over
//     their compute events, simulator/calibration.h);
//   fit_profile_to_points: fitted to measured whole steps (run logs, planner/points.h);
//   project_profile: a calibrated profile's efficiencies on another catalog device (a what-if).
// Each returns the profile (oomb.gpu/1) with its provenance in
// calibrated_from and sources.efficiency; a failed or degenerate fit throws (check_fit). The CLI
// checks the profile with the loader before it writes it.
#include <string>
#include <vector>

#include "core/json.h"
#include "models/specs.h"
#include "simulator/calibration.h"

namespace oomb::planner {

// A failed or degenerate fit (R^2 undefined: measurements that do not vary and a fit that does not
// reproduce them; a non-finite parameter) must not become a profile (`plan --gpu` would trust it):
// Error naming `what` (the flag that gave the measurements).
void check_fit(const simulator::FitResult& fit, const std::string& what);

struct TracesProfile {
  models::GpuSpec profile;
  simulator::FitResult fit;
  size_t events = 0;  // compute events fitted
  Json json;          // the profile with its "calibration" (the fit)
};
// `base` is the profile whose efficiencies are fitted (a cpu profile for cpu traces, a gpu one
// otherwise); `hold` names parameters kept at base's values; `id` "" = base.id + "-calibrated".
TracesProfile fit_profile_to_traces(const models::GpuSpec& base, const std::vector<std::string>& trace_paths,
                                    const std::vector<std::string>& hold, const std::string& id);

struct PointsProfile {
  std::vector<simulator::MeasuredPoint> points;
  simulator::PointsFit fit;
  Json calibration;  // the fit, one row per point (measured, predicted, errors) instead of residuals
  Json json;         // the profile with its "calibration"
};
// `gpu` is the flag's value (points name plans and models relative to their files).
PointsProfile fit_profile_to_points(const std::string& gpu, const models::GpuSpec& base,
                                    const std::vector<std::string>& point_paths, const std::vector<std::string>& hold,
                                    const std::string& id);

struct Projection {
  models::GpuSpec from;     // the calibrated profile
  models::GpuSpec profile;  // `to` with from's efficiencies
  bool other_kind = false;  // a cpu profile's efficiencies on a gpu (or the reverse): a what-if only
};
// `from` must be a calibrated profile (calibrated_from set); `id` "" = to's id + "-projected".
Projection project_profile(const std::string& from, const std::string& to, const std::string& id);

}  // namespace oomb::planner
