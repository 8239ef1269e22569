// The GPU's clock on the emulated network engine's clock (net/device_clock.hpp): unknown until a
// stamped request was seen; then the smallest (seen - posted) of recent requests, so a request seen
// late does not move it; a later window's minimum replaces an old one, so drift is followed.
#include <cstdint>

#include "common/testing.hpp"
#include "net/device_clock.hpp"

using switchyard::net::DeviceClock;

namespace {

// The GPU's clock runs `offset` ahead of the engine's (any value: the two have different epochs).
constexpr int64_t kOffset = 1'700'000'000'000'000'000;

uint64_t posted_at(int64_t engine_ns, int64_t offset = kOffset) {
    return uint64_t(engine_ns + offset);
}

}  // namespace

SY_TEST(DeviceClock, UnknownUntilAStampedRequestIsSeen) {
    DeviceClock clock;
    SY_CHECK(!clock.known());
    SY_CHECK_EQ(clock.device_ns(5'000), uint64_t(0));
    clock.sample(10'000, 0);  // not stamped
    SY_CHECK(!clock.known());
    clock.sample(10'000, posted_at(9'000));
    SY_CHECK(clock.known());
}

SY_TEST(DeviceClock, TheQuickestRequestSetsTheOffset) {
    // Requests seen 0.8 to 20 us after their post: the estimate is off by the quickest one's delay,
    // towards the GPU's time being earlier (words held a little less).
    DeviceClock clock;
    const int64_t delays[] = {20'000, 3'000, 800, 12'000, 5'000};
    int64_t t = 1'000'000;
    for (int64_t delay : delays) {
        clock.sample(t + delay, posted_at(t));
        t += 50'000;
    }
    const int64_t at = 2'000'000;
    SY_CHECK_EQ(int64_t(clock.device_ns(at)), at + kOffset - 800);
}

SY_TEST(DeviceClock, FollowsDriftWindowByWindow) {
    // The GPU's clock falls 5 us behind the engine's (every request now looks 5 us slower): once a
    // window of new samples has passed, the old minimum no longer counts.
    DeviceClock clock;
    int64_t t = 0;
    for (int i = 0; i < 10; ++i, t += 1'000'000) clock.sample(t + 1'000, posted_at(t));
    SY_CHECK_EQ(int64_t(clock.device_ns(t)), t + kOffset - 1'000);
    const int64_t drifted = kOffset - 5'000;
    t += 2 * DeviceClock::kWindowNs;
    clock.sample(t + 1'000, posted_at(t, drifted));
    SY_CHECK_EQ(int64_t(clock.device_ns(t)), t + kOffset - 1'000);  // the old window still counts
    for (int i = 0; i < 2; ++i) {
        t += DeviceClock::kWindowNs / 2 + 1;
        clock.sample(t + 1'000, posted_at(t, drifted));
    }
    SY_CHECK_EQ(int64_t(clock.device_ns(t)), t + drifted - 1'000);
}

SY_TEST(DeviceClock, PostsOnTheEngineClockAreNeverEarly) {
    // A request's post on the engine's clock: its true time plus the quickest request's delay, and
    // back on the GPU's clock exactly its stamp (a word due one latency after a post lands then).
    DeviceClock clock;
    SY_CHECK_EQ(clock.engine_ns(posted_at(5'000), -1), int64_t(-1));  // unknown yet
    clock.sample(1'000'000 + 40'000, posted_at(1'000'000));           // seen 40 us late
    clock.sample(2'000'000 + 900, posted_at(2'000'000));              // seen 0.9 us late
    const int64_t posted = 2'500'000;  // a request posted then, seen 120 us later
    clock.sample(posted + 120'000, posted_at(posted));
    const int64_t on_engine = clock.engine_ns(posted_at(posted), -1);
    SY_CHECK_EQ(on_engine, posted + 900);
    SY_CHECK_EQ(clock.device_ns(on_engine + 3'000), posted_at(posted + 3'000));
}

SY_TEST_MAIN()
