// Communicator: how ranks find each other on the host side (bootstrap).
//
// Buffers use it to exchange IPC handles and configurations, and for host barriers. It is not on
// the data path: dispatch and combine move data through mapped GPU memory.
//
// Every collective takes a timeout; when it expires the call throws TimeoutError naming this
// rank, a peer that did not arrive (or -1 if unknown) and the phase.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace switchyard {

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

    // Convenience: all-gather of a trivially copyable value.
    template <typename T>
    std::vector<T> all_gather_value(const T& value, std::chrono::milliseconds timeout) {
        std::vector<T> out(static_cast<size_t>(size()));
        all_gather(&value, sizeof(T), out.data(), timeout);
        return out;
    }
};

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
