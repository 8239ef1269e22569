// The GPU's clock (%globaltimer) on the emulated network engine's clock (steady_clock), so the
// engine can hand its copy kernel a call ahead of time with the moment its words are due, and the
// kernel holds them until then (emulated_scheduler.hpp, "Handing over ahead").
//
// Every request a kernel posts carries the globaltimer at its post; the engine sees it a little
// later, so (seen - posted) is the clocks' offset plus a delay of at least zero (the ring's
// visibility, the engine's pass). Its minimum over recent requests is the offset to within the
// smallest such delay (about a microsecond), which errs towards holding words a little early by
// that much. Recent: the minimum over the current and the previous window of kWindowNs, so a slow
// drift between the two clocks is followed; until a first request was seen the offset is unknown.
// Pure, so the CPU tests check it.
#pragma once

#include <algorithm>
#include <cstdint>

namespace switchyard::net {

class DeviceClock {
  public:
    static constexpr int64_t kWindowNs = 100'000'000;

    // A request posted at globaltimer `posted_ns` (0: not stamped) was seen at engine time `seen_ns`.
    void sample(int64_t seen_ns, uint64_t posted_ns) {
        if (posted_ns == 0) return;
        if (seen_ns - window_start_ >= kWindowNs) {
            previous_ = current_;
            current_ = kUnknown;
            window_start_ = seen_ns;
        }
        current_ = std::min(current_, seen_ns - int64_t(posted_ns));
    }
    bool known() const { return std::min(current_, previous_) != kUnknown; }
    // The globaltimer at engine time `engine_ns` (0 while unknown).
    uint64_t device_ns(int64_t engine_ns) const {
        return known() ? uint64_t(engine_ns - std::min(current_, previous_)) : 0;
    }
    // The engine time at globaltimer `device_ns` (`otherwise` while unknown): when a request was
    // posted, to within the smallest delay seen (never before it was posted).
    int64_t engine_ns(uint64_t device_ns, int64_t otherwise) const {
        return known() ? int64_t(device_ns) + std::min(current_, previous_) : otherwise;
    }

  private:
    static constexpr int64_t kUnknown = INT64_MAX;
    int64_t current_ = kUnknown, previous_ = kUnknown;
    int64_t window_start_ = INT64_MIN / 2;
};

}  // namespace switchyard::net
