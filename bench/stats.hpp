// Summary statistics of repeated timings.
#pragma once

#include <cstddef>
#include <vector>

namespace switchyard::bench {

struct TimingStats {
    double median = 0.0;
    double min = 0.0;
    double max = 0.0;
    size_t count = 0;
};

// Median (mean of the two middle values for an even count), min and max. Empty input gives zeros.
TimingStats summarize(std::vector<double> samples);

}  // namespace switchyard::bench
