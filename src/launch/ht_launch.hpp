// Launchers of the high-throughput kernels (one per kernel family).
#pragma once

#include "launch/launch_context.hpp"
#include "switchyard/transport/counts_exchange.cuh"
#include "switchyard/ht/ht_args.cuh"

namespace switchyard::launch {

// Fills the fields every HT kernel shares from the context.
device::HtCommon ht_common(const LaunchContext& context);

// Where the layout kernel of an HT dispatch sends the op's counts notify (transport/counts_exchange.cuh).
device::HtNotifyTarget ht_notify_target(const LaunchContext& context, int32_t local_experts);

void launch_ht_dispatch(const LaunchContext& context, const device::HtDispatchArgs& args, int num_sms);
void launch_ht_receive(const LaunchContext& context, const device::HtReceiveArgs& args);
// One warp per combine block publishes the register senders' rows (kernels/switchyard/ht/
// combine_publish.cuh) and every warp claims chunks to reduce: the default.
// SWITCHYARD_HT_COMBINE_PUBLISHER=0 (read once per process) selects the older kernel, whose sender
// warps fence and signal their own rows and whose reducers take fixed chunks.
bool combine_publisher();

void launch_ht_combine(const LaunchContext& context, const device::HtCombineArgs& args, int num_sms);

// Loads the three HT kernels on `device` (see preload_kernels in launch_context.hpp).
void preload_ht(int device);

}  // namespace switchyard::launch
