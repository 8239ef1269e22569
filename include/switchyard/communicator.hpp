// Communicator: how ranks find each other on the host side (bootstrap).
//
// Buffers use it to exchange IPC handles and configurations, and for host barriers. It is not on
// the data path: dispatch and combine move data through mapped GPU memory.
//
// Every collective takes a timeout; when it expires the call throws TimeoutError naming this
// rank, a peer that did not arrive (or -1 if unknown) and the phase.
//
// After a rank's process died, the communicator is unusable (its collectives fail), but it still
// says which processes are gone (peer_status) and can form a communicator of the survivors in the
// same processes (shrink): the way to rebuild a Buffer without restarting (buffer.hpp, "When a peer
// dies").
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace switchyard {

// What a communicator knows about the process of one of its ranks.
enum class PeerStatus : int32_t {
    kUnknown = 0,  // it cannot tell (ranks as threads, NCCL, Python communicators)
    kAlive = 1,
    kGone = 2,  // the process exited or was killed
};

class Communicator {
  public:
    virtual ~Communicator() = default;

    virtual int rank() const = 0;
    virtual int size() const = 0;

    // Every rank contributes `bytes` bytes; `recv` receives size() * bytes bytes, rank r's at
    // offset r * bytes. `bytes` must be equal on all ranks.
    virtual void all_gather(const void* send, size_t bytes, void* recv,
                            std::chrono::milliseconds timeout) = 0;

    // Returns once every rank has entered the barrier.
    virtual void barrier(std::chrono::milliseconds timeout) = 0;

    // "in-process rank 2 of 8", "local-process rank 0 of 4 (key ...)", "nccl rank 1 of 2".
    virtual std::string describe() const = 0;

    // Whether rank `rank`'s process is alive, as far as this communicator can tell without
    // communicating (so also after a failure). The local-process communicator checks the process it
    // met at creation (same process id and start time, not a zombie); others return kUnknown.
    virtual PeerStatus peer_status(int rank) const;
    // "process 4242 on this host" for messages, or empty when the communicator does not know.
    virtual std::string describe_process(int rank) const;

    // The survivors' communicator: every surviving rank calls this with the same `gone` ranks (of
    // this communicator) and gets a communicator of size() - gone.size() ranks, renumbered in the
    // old order (shrunk_rank), in the same processes. Works on a communicator made unusable by a
    // dead peer. Collective over the survivors: throws TimeoutError when one does not come within
    // `timeout` and InvalidArgument when they passed different `gone` lists. The local-process and
    // in-process communicators implement it; others throw UnsupportedError (make a new
    // communicator of the survivors with the framework's own means).
    virtual std::shared_ptr<Communicator> shrink(const std::vector<int>& gone, std::chrono::milliseconds timeout);

    // The ranks whose processes are gone (peer_status == kGone), ascending.
    std::vector<int> gone_ranks() const;

    // Convenience: all-gather of a trivially copyable value.
    template <typename T>
    std::vector<T> all_gather_value(const T& value, std::chrono::milliseconds timeout) {
        std::vector<T> out(static_cast<size_t>(size()));
        all_gather(&value, sizeof(T), out.data(), timeout);
        return out;
    }
};

// Rank `old_rank` of a communicator after shrink(gone): its rank among the survivors, or -1 when it
// is one of `gone`. (Use it to carry per-rank state, such as an LL mask, over to a rebuilt buffer.)
int shrunk_rank(int old_rank, const std::vector<int>& gone);

// Ranks as threads of one process: returns `size` communicators sharing one rendezvous; give
// communicator r to the thread that plays rank r.
std::vector<std::shared_ptr<Communicator>> make_in_process_communicators(int size);

// Ranks as processes on one host. Every process calls this with the same `key` (any string unique
// to the job, e.g. from an environment variable) and its rank; rank 0 hosts the rendezvous (a Unix
// domain socket in the abstract namespace). Throws TimeoutError if the group is not complete
// within `timeout`.
std::shared_ptr<Communicator> make_local_process_communicator(const std::string& key, int rank, int size,
                                                              std::chrono::milliseconds timeout);

// Wraps an existing ncclComm_t (passed as void* so this header does not need nccl.h). Collectives
// run on an internal stream of `device`. The NCCL library is opened at run time (libnccl.so.2, or
// the path in SWITCHYARD_NCCL_LIBRARY); throws UnsupportedError if it cannot be found.
std::shared_ptr<Communicator> wrap_nccl_communicator(void* nccl_comm, int device);

}  // namespace switchyard
