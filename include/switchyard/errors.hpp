// Error types thrown by every host function of Switchyard.
//
// All errors derive from switchyard::Error (itself a std::runtime_error), so a caller can catch
// one type. Messages are written for the person reading the log: they say what was wrong, the
// value seen, and what to do instead.
#pragma once

#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

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

// Another rank failed the operation before any data moved and announced it through the exchange
// this rank was waiting on (it found expert ids out of range, or its buffer was already poisoned),
// so this rank's operation stopped at once instead of waiting out the timeout. Names this rank,
// the failed peer and the phase; the buffer is poisoned on every rank until a collective reset().
class PeerFailedError : public Error {
  public:
    PeerFailedError(const std::string& message, int rank, int peer, std::string phase)
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

// An operation was called on a buffer that an earlier failure poisoned (see Buffer::reset()). The
// earlier failure itself is raised as its own type (TimeoutError, PeerFailedError, InvalidArgument,
// Error) by check_errors(), synchronize() and the operation that waited for it; every later
// operation refuses to start with this error, whose message quotes that failure and whose cause()
// rethrows it.
class PoisonedError : public Error {
  public:
    PoisonedError(const std::string& message, std::exception_ptr cause)
        : Error(message), cause_(std::move(cause)) {}
    // The recorded failure: std::rethrow_exception(cause()) throws it with its own type.
    std::exception_ptr cause() const { return cause_; }

  private:
    std::exception_ptr cause_;
};

}  // namespace switchyard
