#pragma once
// Measured whole steps as calibration points (`oomb calibrate --points`): run logs in CSV (a header
// row of keys, one point per row, '#' comment lines) or JSON (oomb.points/1), each row a plan or the
// knobs (as `oomb plan` reads them, planner/knobs.h) and what was measured (step_s or tokens_per_s,
// optionally peak_device_bytes). Errors name the file and line (or points[i]) and the key.
#include <string>
#include <vector>

#include "models/specs.h"
#include "simulator/calibration.h"

namespace oomb::planner {

// The points of one file, on the fitted device `base` (`gpu_arg` names it, as --gpu did). Plan paths
// in a row are relative to the file's folder.
std::vector<simulator::MeasuredPoint> read_points(const std::string& path, const std::string& gpu_arg,
                                                  const models::GpuSpec& base);

}  // namespace oomb::planner
