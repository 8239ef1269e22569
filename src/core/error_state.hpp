// The host side of the kernels' error record: mapped host memory the kernels write when a wait
// times out or routing is invalid, and its translation into a switchyard exception.
#pragma once

#include <functional>
#include <string>

#include "switchyard/common/diagnostics.cuh"

namespace switchyard::core {

const char* phase_name(int32_t phase);

// What the host knows about a peer, for error messages: a sentence such as "rank 3's process (pid
// 4242) is gone: it exited or was killed", or what this rank's network carried to it, or empty when
// nothing is known. `never_started`: the record says the peer has not started the kernel this rank
// waited for (a co-located peer thread may then be stuck loading a kernel: DESIGN.md §4, rule 7).
// `over_network`: the wait was for a signal or data over the scale-out network.
struct PeerNoteQuery {
    int peer;
    bool never_started;
    bool over_network;
};
using PeerNote = std::function<std::string(const PeerNoteQuery& query)>;

// Throws the exception a recorded error stands for (TimeoutError, PeerFailedError, InvalidArgument
// or Error), with a message that names the rank, the peer, the phase, what the record says about
// the peer and, when `peer_note` knows it, that the peer's process is gone. Waited-for values are
// printed as what they mean (op numbers, counts), never as raw tagged words.
[[noreturn]] void throw_error_record(const device::ErrorRecord& record, double timeout_seconds,
                                     const PeerNote& peer_note = {});

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
    // Throws the recorded error as its own type (throw_error_record); no-op when none.
    void throw_if_error(double timeout_seconds) const;
    // Before an op: throws PoisonedError (the recorded error as its cause, quoted in the message)
    // naming `op` ("the operation" when null); no-op when none.
    void throw_if_poisoned(double timeout_seconds, const char* op = nullptr) const;
    void clear();
    // Set by the Buffer: what its communicator knows of a peer's process.
    void set_peer_note(PeerNote note) { peer_note_ = std::move(note); }

  private:
    PeerNote peer_note_;
    device::ErrorRecord* host_record_ = nullptr;
    device::ErrorRecord* device_record_ = nullptr;
};

}  // namespace switchyard::core
