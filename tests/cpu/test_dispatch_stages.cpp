// The HT dispatches' shared-memory stages (kernels/switchyard/ht/dispatch_send.cuh, StageUse; used by
// the direct and the hierarchical senders): a sender warp stages its tokens through two stages in
// turn, each use of a stage completing one phase of its mbarrier, and waits with a parity test
// (mbarrier.try_wait.parity). On a model of that barrier, the parity StageUse gives each token makes
// every wait hold until that token's own load has landed, for any number of tokens; a parity that
// does not advance with the uses lets every other use of a stage through before its load lands.
#include <vector>

#include "common/testing.hpp"
#include "switchyard/ht/dispatch_send.cuh"

using switchyard::device::StageUse;

namespace {

// An mbarrier with one expected arrival per phase, as far as a parity wait sees it.
struct ModelBarrier {
    int completed = 0;  // phases completed so far; the current phase is `completed`
    // mbarrier.try_wait.parity: true once the phase of that parity before the current one is done,
    // i.e. when the current phase's parity differs.
    bool try_wait(uint32_t parity) const { return uint32_t(completed & 1) != parity; }
};

// Walks `tokens` uses as the senders do (token i loaded into its stage, waited for, then the load
// lands); returns the first index whose wait let it through before its load landed, or -1.
template <typename ParityOf>
int first_early_pass(int tokens, ParityOf parity_of) {
    ModelBarrier stages[2];
    for (int index = 0; index < tokens; ++index) {
        const StageUse use = StageUse::of_token(index);
        ModelBarrier& barrier = stages[use.stage];
        if (barrier.try_wait(parity_of(index, use))) return index;  // the load has not landed yet
        ++barrier.completed;                                        // it lands: the phase completes
        if (!barrier.try_wait(parity_of(index, use))) return -2;    // and now the wait must pass
    }
    return -1;
}

}  // namespace

SY_TEST(DispatchStages, StagesAlternateAndEachWaitHoldsUntilItsOwnLoad) {
    for (int index = 0; index < 64; ++index) {
        const StageUse use = StageUse::of_token(index);
        SY_CHECK_EQ(use.stage, index % 2);
        SY_CHECK_EQ(use.parity, uint32_t((index / 2) % 2));
    }
    for (int tokens : {1, 2, 3, 4, 5, 48, 641})
        SY_CHECK_EQ(first_early_pass(tokens, [](int, StageUse use) { return use.parity; }), -1);
}

SY_TEST(DispatchStages, AParityThatDoesNotAdvanceLetsTheSecondUseOfAStageThrough) {
    // Index 2 is stage 0's second use (phase 1): a parity stuck at 0 passes before its load lands.
    SY_CHECK_EQ(first_early_pass(48, [](int, StageUse) { return 0u; }), 2);
}

SY_TEST_MAIN()
