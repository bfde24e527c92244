#pragma once
// Calibration runs (`oomb calibrate --backend cpu`, issue #15): after the micro-benchmarks, a few
// short steps of the executor on the model to be planned, recorded at layer detail, and the
// profile's efficiencies and per-op overhead fitted to them by least squares (simulator/
// calibration.h). The micro-benchmarks alone time each op class in isolation, at shapes near the
// model's; the runs add what isolation misses (the real chunk and prefix shapes, bf16 staging,
// caches shared between ops), which left the README's calibrate -> plan -> run -> validate loop
// 24-29% off while the fidelity suite, which fits to such runs, was within its bound.
//
// The runs use the storage dtypes and optimizer that `oomb plan` picks by default (bf16 weights,
// gradients and activations, fp32 KV gradients, AdamW on the device), one warm-up step and the
// fastest occurrence of each pass over the timed steps, as `oomb run --trace` times a step.
#include <functional>
#include <string>
#include <vector>

#include "executor/runtime/backend.h"
#include "models/specs.h"
#include "simulator/calibration.h"
#include "step/config.h"

namespace oomb::runner {

struct CalibrationRun {
  std::string name;
  step::Config config;
};

// The runs for a model: small models (hidden <= 256, the shapes of `tiny`) run two layers' full
// steps at a few thousand tokens, dense and sparse; larger ones run two layers at 512 tokens,
// where the LM head's GEMMs dominate, and only the GEMM efficiency is fitted (hold_for).
std::vector<CalibrationRun> calibration_runs(const models::ModelSpec& m);
std::vector<std::string> calibration_hold(const models::ModelSpec& m);

struct CalibrationRunsFit {
  models::GpuSpec profile;  // the micro-benchmark profile with the fitted efficiencies
  simulator::FitResult fit;
  std::vector<std::string> runs;  // names, in order
  std::vector<std::string> held;  // calibration_hold(m): kept at the micro-benchmark values
  double seconds = 0;
};

// Runs calibration_runs(m) on backend with `micro` as the prior profile, `steps` timed steps after
// one warm-up each, and fits. progress (optional) is told each run's name before it starts.
CalibrationRunsFit fit_to_calibration_runs(executor::Backend& backend, const models::ModelSpec& m, const models::GpuSpec& micro,
                                           int steps = 3,
                                           const std::function<void(const std::string&)>& progress = {});

}  // namespace oomb::runner
