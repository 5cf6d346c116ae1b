// The learning-rate schedules: cosine, WSD and constant, each with linear warmup
// (docs/design.md#training).
#pragma once

#include <cstdint>

#include "drope/config/names.h"

namespace drope::train {

struct ScheduleConfig {
  ScheduleType type = ScheduleType::kCosine;
  int64_t warmup = 0;           // linear warmup steps from lr/warmup to lr
  int64_t steps = 1000;         // total steps of the phase
  double min_lr_ratio = 0.1;    // cosine/wsd floor as a fraction of the peak
  double decay_fraction = 0.2;  // wsd: final fraction of steps spent decaying
  DecayShape decay_shape = DecayShape::kLinear;  // wsd: linear, or cosine (half a cosine from lr to the floor)
};

// Learning rate at `step` (0-based) for peak `lr`.
double schedule_lr(const ScheduleConfig& s, int64_t step, double lr);

}  // namespace drope::train
