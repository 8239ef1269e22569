// Where an HT op's time goes, from a traced run's timeline (Buffer::op_timeline): the span in which
// its rows move, and what remains of the op's time around it (the fixed part: routing, the counts
// exchange, completion, the receive's start, launches).
#pragma once

#include <optional>

#include "switchyard/op_timeline.hpp"

namespace switchyard::bench {

// The rows' span of an HT dispatch or combine timeline, in microseconds: from the moment every
// block could send (dispatch: it had its peers' counts; combine: it was past the entry handshake)
// to the last sender's rows drained. Blocks that could send earlier started their rows earlier, so
// this is the part of the span during which every block moves rows. Empty when a mark is missing,
// not reached, or out of order, or the timeline is not an HT op's.
std::optional<double> ht_rows_us(const OpTimeline& timeline);

}  // namespace switchyard::bench
