#include "stats.hpp"

#include <algorithm>

namespace switchyard::bench {

TimingStats summarize(std::vector<double> samples) {
    TimingStats stats;
    stats.count = samples.size();
    if (samples.empty()) return stats;
    std::sort(samples.begin(), samples.end());
    const size_t mid = samples.size() / 2;
    stats.median = samples.size() % 2 ? samples[mid] : 0.5 * (samples[mid - 1] + samples[mid]);
    stats.min = samples.front();
    stats.max = samples.back();
    return stats;
}

}  // namespace switchyard::bench
