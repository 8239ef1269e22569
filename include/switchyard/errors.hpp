// Error types thrown by every host function of Switchyard.
//
// All errors derive from switchyard::Error (itself a std::runtime_error), so a caller can catch
// one type. Messages are written for the person reading the log: they say what was wrong, the
// value seen, and what to do instead.
#pragma once

#include <stdexcept>
#include <string>

namespace switchyard {

class Error : public std::runtime_error {
  public:
    explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// A caller passed something the library cannot accept (shape, dtype, stride, alignment, routing).
// Raised before any kernel runs.
class InvalidArgument : public Error {
  public:
    using Error::Error;
};

// A wait on another rank (or on the host rendezvous) ran past its budget. Names the waiting rank,
// the peer it waited for and the phase, so a stalled job says where it stalled.
class TimeoutError : public Error {
  public:
    TimeoutError(const std::string& message, int rank, int peer, std::string phase)
        : Error(message), rank_(rank), peer_(peer), phase_(std::move(phase)) {}
    int rank() const { return rank_; }
    int peer() const { return peer_; }
    const std::string& phase() const { return phase_; }

  private:
    int rank_;
    int peer_;
    std::string phase_;
};

// A CUDA runtime, driver or NVRTC call failed.
class CudaError : public Error {
  public:
    using Error::Error;
};

// The request is valid in general but not supported on this machine, build or topology.
class UnsupportedError : public Error {
  public:
    using Error::Error;
};

// The JIT could not compile a kernel; the message carries the compiler log.
class CompileError : public Error {
  public:
    using Error::Error;
};

// A buffer was used after a failed operation left it in an unknown state (see Buffer::reset()).
class PoisonedError : public Error {
  public:
    using Error::Error;
};

}  // namespace switchyard
