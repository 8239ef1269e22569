// How an op is ordered with the caller's work, and the event that says when it is done
// (DESIGN.md §2, "Streams").
//
// By default an op runs on the buffer's communication stream after everything queued so far on
// the caller's stream, and the caller's stream then waits for it (synchronous mode): the outputs
// can be used on the caller's stream right away. OpOrder changes either end; every op returns its
// completion as an OpEvent.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

namespace switchyard {

struct OpOrder {
    // Start after this event instead of after the caller's stream: the op then does not wait for
    // the work queued on the caller's stream. The event must be on the buffer's device and
    // recorded before the call (a wait on an event never recorded does not wait at all). With
    // BufferConfig::launch_on_caller_stream the caller's stream itself waits for it.
    cudaEvent_t after = nullptr;
    // Asynchronous mode: the caller's stream does not wait for the op. Wait on the result's `done`
    // (done.wait(stream)) before using its outputs or overwriting its inputs on another stream; in
    // a CUDA graph capture the capturing stream must wait on it before the capture ends. With
    // BufferConfig::launch_on_caller_stream the op is on the caller's stream and this changes
    // nothing. Outputs are freed in the order of the stream the op ran on: work on another stream
    // that still reads them must have finished, or be waited for by the next op (through its
    // caller's stream or its `after` event), before the last copy of the result goes.
    bool async = false;
};

// The completion of one op: a CUDA event recorded right after it on the stream it ran on. Copies
// share the event, which stays valid after its Buffer is destroyed. A later op on the same buffer
// does not re-record it while a copy is alive.
class OpEvent {
  public:
    OpEvent() = default;
    // Made by the buffer: `owner` recycles or destroys the event when the last copy goes.
    OpEvent(cudaEvent_t event, std::shared_ptr<void> owner) : event_(event), owner_(std::move(owner)) {}

    bool valid() const { return event_ != nullptr; }
    cudaEvent_t get() const { return event_; }
    // `stream` waits for the op (enqueued; the host does not block; graph-capturable).
    void wait(cudaStream_t stream) const;
    // The host waits for the op (not for an op recorded inside a graph capture). Errors the op's
    // kernels recorded (a timeout) are raised by Buffer::check_errors(), not here.
    void synchronize() const;
    // Whether the op has finished.
    bool done() const;

  private:
    cudaEvent_t event_ = nullptr;
    std::shared_ptr<void> owner_;
};

}  // namespace switchyard
