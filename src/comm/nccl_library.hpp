// NCCL, opened at run time.
//
// The library never includes nccl.h and never links libnccl: wheels and CPU-only machines must load
// without it, and the process may already hold the NCCL that PyTorch ships. So the few types and
// entry points Switchyard uses are declared here by hand (ABI-compatible with NCCL 2.x) and
// resolved with dlopen/dlsym on first use.
//
// Search order of nccl_library():
//   1. $SWITCHYARD_NCCL_LIBRARY, if set (a full path or a soname). If it does not load, that is an
//      error: no fallback, so a wrong override is noticed.
//   2. "libnccl.so.2" through the normal loader path (LD_LIBRARY_PATH, ld.so.cache, RUNPATH). This
//      also returns a copy already loaded into the process, e.g. by torch.
//   3. The CUDA toolkit's library directories: the toolkit the library was built against, then
//      $CUDA_HOME, $CUDA_PATH and /usr/local/cuda (lib64, lib, targets/<arch>/lib).
//   4. The NCCL wheel that torch depends on: site-packages/nvidia/nccl/lib under $VIRTUAL_ENV,
//      $CONDA_PREFIX, ~/.local and the system Python directories.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

namespace switchyard::nccl {

// Our own spellings of nccl.h's types. Values and layouts match nccl.h of NCCL 2.x.
using Comm = struct OpaqueNcclComm*;  // ncclComm_t
using Result = int;                   // ncclResult_t
using DataType = int;                 // ncclDataType_t

constexpr Result kSuccess = 0;     // ncclSuccess
constexpr Result kInProgress = 7;  // ncclInProgress (non-blocking communicators)

constexpr DataType kInt8 = 0;  // ncclInt8 == ncclChar
constexpr DataType kChar = 0;
constexpr DataType kUint8 = 1;
constexpr DataType kInt32 = 2;
constexpr DataType kUint32 = 3;
constexpr DataType kInt64 = 4;
constexpr DataType kUint64 = 5;
constexpr DataType kFloat16 = 6;
constexpr DataType kFloat32 = 7;
constexpr DataType kFloat64 = 8;
constexpr DataType kBfloat16 = 9;

struct UniqueId {  // ncclUniqueId: passed by value, so the size must match NCCL_UNIQUE_ID_BYTES.
    char internal[128];
};

struct Library {
    std::string path;  // what dlopen was given, for messages
    void* handle = nullptr;
    int version = 0;  // ncclGetVersion's code, e.g. 22805 for 2.28.5

    Result (*get_version)(int* version) = nullptr;
    const char* (*get_error_string)(Result result) = nullptr;
    Result (*get_unique_id)(UniqueId* id) = nullptr;
    Result (*comm_init_rank)(Comm* comm, int nranks, UniqueId id, int rank) = nullptr;
    Result (*comm_init_all)(Comm* comms, int ndev, const int* devlist) = nullptr;
    Result (*comm_destroy)(Comm comm) = nullptr;
    Result (*comm_count)(Comm comm, int* count) = nullptr;
    Result (*comm_user_rank)(Comm comm, int* rank) = nullptr;
    Result (*comm_get_async_error)(Comm comm, Result* async_error) = nullptr;
    Result (*all_gather)(const void* send, void* recv, size_t count, DataType type, Comm comm,
                         cudaStream_t stream) = nullptr;
    Result (*send)(const void* buf, size_t count, DataType type, int peer, Comm comm,
                   cudaStream_t stream) = nullptr;
    Result (*recv)(void* buf, size_t count, DataType type, int peer, Comm comm,
                   cudaStream_t stream) = nullptr;
    Result (*group_start)() = nullptr;
    Result (*group_end)() = nullptr;

    // The device API and windows (NCCL >= 2.27/2.28; null when this NCCL lacks them). Pointer
    // arguments keep nccl.h's layouts (ncclDevCommRequirements, ncclDevComm, ncclWindow_t), which
    // only the GIN set-up (src/net/gin_network.cpp) fills, against the headers it was built with.
    Result (*mem_alloc)(void** pointer, size_t bytes) = nullptr;
    Result (*mem_free)(void* pointer) = nullptr;
    Result (*comm_window_register)(Comm comm, void* buffer, size_t bytes, void** window, int flags) = nullptr;
    Result (*comm_window_deregister)(Comm comm, void* window) = nullptr;
    Result (*dev_comm_create)(Comm comm, const void* requirements, void* dev_comm) = nullptr;
    Result (*dev_comm_destroy)(Comm comm, const void* dev_comm) = nullptr;
    const char* (*get_last_error)(Comm comm) = nullptr;

    // "NCCL error 2 (unhandled system error)" style text for messages.
    std::string describe_error(Result result) const;
};

// Loads NCCL once per process and returns the table. Throws UnsupportedError, listing every path it
// tried, if no library loads or one lacks an entry point. A failed load is retried on the next call.
const Library& library();

// Uncached load (the search order above), for tests and tools; never unloads (dlclose of NCCL is
// unsafe while communicators may exist).
Library load_library();

// The candidates load_library() tries after $SWITCHYARD_NCCL_LIBRARY, in order.
std::vector<std::string> library_candidates();

// "2.28.9" for NCCL_VERSION_CODE 22809 (and the pre-2.9 scheme, 2708 -> "2.7.8").
std::string version_text(int code);

}  // namespace switchyard::nccl

namespace switchyard {
class Communicator;
namespace nccl {
// The ncclComm_t under a communicator made by wrap_nccl_communicator, or null for any other kind
// (nccl_communicator.cpp).
Comm communicator_handle(const Communicator& communicator);
}  // namespace nccl

}  // namespace switchyard::nccl

namespace switchyard {
// The name the benchmark and wrappers use.
using NcclLibrary = nccl::Library;
inline const NcclLibrary& nccl_library() {
    return nccl::library();
}
}  // namespace switchyard
