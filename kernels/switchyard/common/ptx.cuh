// Thin wrappers over the PTX instructions the kernels use: scoped loads and stores, fences,
// the global timer, mbarriers and bulk (TMA) copies. One instruction per function, named for it,
// so kernel bodies read as algorithms.
#pragma once

#include "switchyard/common/base.cuh"

// Device code only: host code includes the layout headers for their structs, never these.
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace switchyard::device::ptx {

SY_DEVICE uint32_t lane_id() {
    uint32_t lane;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    return lane;
}

// gridDim.x read where it is used: a kernel at its register cap may otherwise keep one read of it
// live from its first use to its last, and spill it (the HT combine did).
SY_DEVICE uint32_t grid_blocks() {
    uint32_t blocks;
    asm volatile("mov.u32 %0, %%nctaid.x;" : "=r"(blocks));
    return blocks;
}

SY_DEVICE uint32_t lanemask_lt() {
    uint32_t mask;
    asm volatile("mov.u32 %0, %%lanemask_lt;" : "=r"(mask));
    return mask;
}

// Nanoseconds since an arbitrary epoch, the same on every SM (coarse, ~1 µs updates).
SY_DEVICE uint64_t globaltimer_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// --- Programmatic dependent launch (sm_90+) ------------------------------------------------------
// Both are no-ops when the kernel was launched without the programmatic-serialization attribute.

// Waits until the previous kernel in the stream has completed and its writes are visible.
SY_DEVICE void grid_dependency_wait() {
    asm volatile("griddepcontrol.wait;" ::: "memory");
}

// Lets the next kernel in the stream (if launched with the attribute) be scheduled now.
SY_DEVICE void launch_dependents() {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

SY_DEVICE uint32_t smem_address(const void* pointer) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

// --- Scoped memory operations (system scope: the peer may be another GPU) -------------------------
SY_DEVICE uint64_t ld_acquire_sys(const uint64_t* address) {
    uint64_t value;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(value) : "l"(address) : "memory");
    return value;
}

SY_DEVICE uint32_t ld_acquire_sys(const uint32_t* address) {
    uint32_t value;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(value) : "l"(address) : "memory");
    return value;
}

// GPU scope: for flags that only this GPU's threads read and write (cheaper than system scope,
// whose release waits for this thread's writes to reach peers and the host).
SY_DEVICE uint64_t ld_acquire_gpu(const uint64_t* address) {
    uint64_t value;
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(value) : "l"(address) : "memory");
    return value;
}

SY_DEVICE uint64_t ld_relaxed_sys(const uint64_t* address) {
    uint64_t value;
    asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(value) : "l"(address) : "memory");
    return value;
}

SY_DEVICE uint32_t ld_relaxed_sys(const uint32_t* address) {
    uint32_t value;
    asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(value) : "l"(address) : "memory");
    return value;
}

SY_DEVICE uint32_t ld_relaxed_gpu(const uint32_t* address) {
    uint32_t value;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(value) : "l"(address) : "memory");
    return value;
}

SY_DEVICE uint64_t ld_relaxed_gpu(const uint64_t* address) {
    uint64_t value;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(value) : "l"(address) : "memory");
    return value;
}

SY_DEVICE void st_release_sys(uint64_t* address, uint64_t value) {
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(address), "l"(value) : "memory");
}

SY_DEVICE void st_release_gpu(uint64_t* address, uint64_t value) {
    asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(address), "l"(value) : "memory");
}

// Without ordering of its own: after fence_acq_rel_sys it completes a release pattern. (A
// .release store or reduction is compiled to a system fence of its own, MEMBAR.ALL.SYS, in
// addition to the one before it: two fences per signal, as the LL dispatch's SASS showed.)
SY_DEVICE void st_relaxed_sys(uint64_t* address, uint64_t value) {
    asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(address), "l"(value) : "memory");
}

SY_DEVICE void st_relaxed_gpu(uint32_t* address, uint32_t value) {
    asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(address), "r"(value) : "memory");
}

SY_DEVICE void st_relaxed_gpu(uint64_t* address, uint64_t value) {
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(address), "l"(value) : "memory");
}

// Without ordering of its own: after fence_acq_rel_sys it completes a release pattern, so one
// fence can serve several signals (see st_relaxed_sys).
SY_DEVICE void red_add_relaxed_sys(uint64_t* address, uint64_t value) {
    asm volatile("red.relaxed.sys.global.add.u64 [%0], %1;" ::"l"(address), "l"(value) : "memory");
}

SY_DEVICE void red_add_release_gpu(uint32_t* address, uint32_t value) {
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(address), "r"(value) : "memory");
}

SY_DEVICE void fence_acq_rel_sys() {
    asm volatile("fence.acq_rel.sys;" ::: "memory");
}
SY_DEVICE void fence_acq_rel_gpu() {
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
}

// Orders generic-proxy accesses of shared memory before later async-proxy (bulk copy) accesses.
SY_DEVICE void fence_proxy_async_shared() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// Orders async-proxy writes to global memory (bulk stores) with later generic accesses.
SY_DEVICE void fence_proxy_async_global() {
    asm volatile("fence.proxy.async.global;" ::: "memory");
}

// --- cp.async (per-thread asynchronous copies into shared memory) -------------------------------------
SY_DEVICE void cp_async_4(void* smem_destination, const void* global_source) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem_address(smem_destination)),
                 "l"(global_source)
                 : "memory");
}
SY_DEVICE void cp_async_commit() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}
// Waits for all of this thread's committed cp.async groups.
SY_DEVICE void cp_async_wait_all() {
    asm volatile("cp.async.wait_group 0;" ::: "memory");
}

// --- mbarrier -------------------------------------------------------------------------------------
SY_DEVICE void mbarrier_init(uint64_t* barrier, uint32_t arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_address(barrier)), "r"(arrivals)
                 : "memory");
}

SY_DEVICE void fence_mbarrier_init() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

SY_DEVICE void mbarrier_arrive_expect_tx(uint64_t* barrier, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_address(barrier)),
                 "r"(bytes)
                 : "memory");
}

// A plain arrival (release at block scope).
SY_DEVICE void mbarrier_arrive(uint64_t* barrier) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_address(barrier)) : "memory");
}

// Whether the phase of `parity` has completed (acquire at block scope): test_wait answers at once,
// try_wait may first suspend the thread for a while (a system-dependent limit) before it reports
// that the phase is not done. Callers loop on either.
#define SY_MBARRIER_PARITY_CHECK(instruction)                    \
    "{\n .reg .pred p;\n mbarrier." instruction                  \
    ".parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, " \
    "p;\n}\n"
template <bool kMaySuspend>
SY_DEVICE bool mbarrier_check_parity(uint64_t* barrier, uint32_t parity) {
    uint32_t done;
    if constexpr (kMaySuspend)
        asm volatile(SY_MBARRIER_PARITY_CHECK("try_wait")
                     : "=r"(done)
                     : "r"(smem_address(barrier)), "r"(parity)
                     : "memory");
    else
        asm volatile(SY_MBARRIER_PARITY_CHECK("test_wait")
                     : "=r"(done)
                     : "r"(smem_address(barrier)), "r"(parity)
                     : "memory");
    return done != 0;
}
#undef SY_MBARRIER_PARITY_CHECK

SY_DEVICE bool mbarrier_test_wait_parity(uint64_t* barrier, uint32_t parity) {
    return mbarrier_check_parity<false>(barrier, parity);
}
SY_DEVICE bool mbarrier_try_wait_parity(uint64_t* barrier, uint32_t parity) {
    return mbarrier_check_parity<true>(barrier, parity);
}

// --- Bulk copies (TMA, 1-D): sizes and addresses multiples of 16 bytes ------------------------------
SY_DEVICE void bulk_load(void* smem_destination, const void* global_source, uint32_t bytes,
                         uint64_t* barrier) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
            smem_address(smem_destination)),
        "l"(global_source), "r"(bytes), "r"(smem_address(barrier))
        : "memory");
}

SY_DEVICE void bulk_store(void* global_destination, const void* smem_source, uint32_t bytes) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(global_destination),
                 "r"(smem_address(smem_source)), "r"(bytes)
                 : "memory");
}

SY_DEVICE void bulk_commit() {
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// Wait until at most N bulk groups are pending reading shared memory (their sources can be reused).
template <int N>
SY_DEVICE void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}

// Wait until at most N bulk groups are pending completion (their writes are performed).
template <int N>
SY_DEVICE void bulk_wait() {
    asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
}

}  // namespace switchyard::device::ptx

#endif
