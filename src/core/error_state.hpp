// The host side of the kernels' error record: mapped host memory the kernels write when a wait
// times out or routing is invalid, and its translation into a switchyard exception.
#pragma once

#include "switchyard/common/diagnostics.cuh"

namespace switchyard::core {

const char* phase_name(int32_t phase);

// Throws the exception a recorded error stands for (TimeoutError, InvalidArgument or Error), with
// a message that names the rank, the peer, the phase and what the record says about the peer.
[[noreturn]] void throw_error_record(const device::ErrorRecord& record, double timeout_seconds);

class ErrorState {
  public:
    ErrorState();
    ~ErrorState();
    ErrorState(const ErrorState&) = delete;
    ErrorState& operator=(const ErrorState&) = delete;

    device::ErrorRecord* device_record() const { return device_record_; }
    // The record as the host sees it (mapped memory): the emulated network's engine reports a
    // refused request here.
    device::ErrorRecord* host_record() const { return host_record_; }
    bool has_error() const;
    // Throws the recorded error (TimeoutError or InvalidArgument); no-op when none.
    void throw_if_error(double timeout_seconds) const;
    void clear();

  private:
    device::ErrorRecord* host_record_ = nullptr;
    device::ErrorRecord* device_record_ = nullptr;
};

}  // namespace switchyard::core
