#include "drope/train/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "drope/core/error.h"

namespace drope::train {

double schedule_lr(const ScheduleConfig& s, int64_t step, double lr) {
  if (s.warmup > 0 && step < s.warmup) return lr * double(step + 1) / double(s.warmup);
  const double floor = lr * s.min_lr_ratio;
  if (s.type == ScheduleType::kConstant) return lr;
  if (s.type == ScheduleType::kCosine) {
    const double t = std::min(1.0, double(step - s.warmup) / double(std::max<int64_t>(1, s.steps - s.warmup)));
    return floor + (lr - floor) * 0.5 * (1.0 + std::cos(M_PI * t));
  }
  if (s.type == ScheduleType::kWsd) {
    const int64_t decay_steps = std::max<int64_t>(1, int64_t(std::llround(s.decay_fraction * double(s.steps))));
    const int64_t decay_start = s.steps - decay_steps;
    if (step < decay_start) return lr;
    const double t = std::min(1.0, double(step - decay_start) / double(decay_steps));
    if (s.decay_shape == DecayShape::kCosine) return floor + (lr - floor) * 0.5 * (1.0 + std::cos(M_PI * t));
    return lr + (floor - lr) * t;
  }
  fail("schedule_lr: no formula for schedule type {}", static_cast<int>(s.type));
}

}  // namespace drope::train
