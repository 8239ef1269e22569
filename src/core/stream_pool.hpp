// Process-wide pool of non-blocking CUDA streams, per device, reused instead of destroyed.
//
// Why: CUDA maps streams onto CUDA_DEVICE_MAX_CONNECTIONS hardware queues in creation order. A
// process that creates and destroys streams (a buffer per test configuration, a buffer re-created
// after a reset) keeps advancing that order, so two live streams of co-located ranks end up on one
// queue; a kernel spinning on one rank's stream then holds back the peer's kernel queued behind
// it, and both time out. We saw this on the GPU machine as signals that arrive only after the
// waiting rank has given up. Reusing streams keeps the number ever created equal to the largest
// number alive at once, so each live stream keeps its own queue.
#pragma once

#include <cuda_runtime_api.h>

namespace switchyard::core {

// A non-blocking stream on `device` (the caller's current device is left as it was).
cudaStream_t acquire_stream(int device);
// Returns a stream from acquire_stream(device); its work must be complete or it must at least be
// safe for the next owner to queue behind it.
void release_stream(int device, cudaStream_t stream);

// One stream per device for every rank's host-synchronous helper work (allocations made while a
// caller's stream is being captured): it never runs kernels, so sharing it costs nothing, and it
// keeps co-located ranks from using a hardware queue each for it.
cudaStream_t shared_helper_stream(int device);

}  // namespace switchyard::core
