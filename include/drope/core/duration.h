// Durations as people read them, for progress lines and ETAs (the trainer's step lines, drope-data prepare).
#pragma once

#include <string>

namespace drope {

// "42s", "3m07s", "2h05m"; "?" when negative, NaN or absurd (more than ~4 months).
std::string format_duration(double seconds);

}  // namespace drope
