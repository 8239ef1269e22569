// The emulated network's engine (see emulated_network.hpp).
#include "net/emulated_network.hpp"

#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/stream_pool.hpp"
#include "core/tuning.hpp"
#include "jit/driver_api.hpp"
#include "jit/jit.hpp"
#include "net/copy_pieces.hpp"
#include "net/gin_kernels.hpp"
#include "switchyard/transport/net_copy.cuh"
#include "util/cuda_check.hpp"
#include "util/mapped_host.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::net {

std::vector<jit::KernelSource> network_engine_catalog() {
    return {{"net_copy", "switchyard/transport/net_copy.cuh", "switchyard::device::net_copy_kernel"}};
}

namespace {

using device::EmulatedNetState;

int64_t steady_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

// After this long without requests (or an op announcing itself: expect_traffic) the engine polls
// every kIdlePoll instead of spinning; an op's launch wakes it at once.
constexpr int64_t kSpinAfterActivityNs = 20'000'000;
constexpr auto kIdlePoll = std::chrono::microseconds(50);
// Loaded when the network is created: a rank loading it later could wait for a co-located rank's
// running kernel (DESIGN.md §4, rule 7).
jit::KernelSource network_copy_source() {
    return network_engine_catalog()[0];
}

// Whether a CUDA tool (compute-sanitizer, a profiler) is injected into this process. Such a tool
// may hold a kernel launch until the device is idle, and the ranks' kernels wait for the engine's
// deliveries: under compute-sanitizer memcheck the engine's first copy-kernel launch never returned
// (HierHtSanitizer.SmallTwoNodeRoundTrip timed out, 2026-12-02), and event calls on the engine's
// stream held back a call's signals (2026-12-03). With a tool the engine issues only the driver's
// copies, which such tools do not hold, and its words, and records no events; everything else is
// as without the tool. compute-sanitizer 13.0 sets the last two variables (not
// CUDA_INJECTION64_PATH, which the profilers use).
bool cuda_tool_attached() {
    for (const char* name :
         {"CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH", "NV_SANITIZER_INJECTION_PORT_BASE"}) {
        const char* value = std::getenv(name);
        if (value && *value) return true;
    }
    return false;
}

// Descriptors taken from one ring per pass, so one busy context cannot hold the others back.
constexpr int kMaxTakenPerPass = 1024;
// How often the engine refreshes the accounting stats() reads while it has work.
constexpr int64_t kStatsRefreshNs = 50'000;
// How long before their words are due calls are handed to the copy kernel (SchedulerConfig::
// issue_lead_ns): more than a launch takes to land under load (the stream's lag, NetworkEngineStats,
// was 30-35 us on one H200 with four ranks), so the wire's slot, not the launch, sets when a batch's
// signal lands.
constexpr int64_t kIssueLeadNs = 100'000;

}  // namespace

// The executor over CUDA: one in-order stream; copies with the engine's copy kernel (the driver's
// copies with a CUDA tool attached), words with stream memory operations (or 8-byte copies from
// pinned staging memory).
class EmulatedNetwork::CudaExecutor final : public Executor {
  public:
    CudaExecutor(int device, cudaStream_t stream, uint8_t* local_window, std::vector<uint8_t*> windows,
                 std::vector<uint64_t*> states, const DeviceClock* clock)
        : device_(device),
          stream_(stream),
          local_window_(local_window),
          windows_(std::move(windows)),
          states_(std::move(states)),
          clock_(clock),
          copy_kernel_(cuda_tool_attached() ? nullptr : &jit::get_kernel(network_copy_source(), device)) {
        // Stream memory operations: the entry point and the device's say-so.
        try {
            const jit::DriverApi& api = jit::driver();
            int supported = 0;
            CUdevice handle = 0;
            if (api.cuStreamWriteValue64 && api.cuDeviceGet(&handle, device) == CUDA_SUCCESS &&
                api.cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS,
                                         handle) == CUDA_SUCCESS)
                memops_ = supported != 0;
            batch_memops_ = memops_ && api.cuStreamBatchMemOp != nullptr;
        } catch (const std::exception&) {
            memops_ = false;
        }
        const auto staging = util::allocate_mapped_host<uint64_t>(kStagingWords + 1);
        staging_ = staging.host;
        staging_[kStagingWords] = 1;  // the poison value
        for (auto& event : group_done_)
            SY_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    }
    ~CudaExecutor() override {
        for (auto event : group_done_)
            if (event) cudaEventDestroy(event);
        for (auto& sample : lag_samples_)
            if (sample.event) cudaEventDestroy(sample.event);
        if (staging_) cudaFreeHost(staging_);
    }

    // How signals, counters and flush reports are written.
    // Whether the words can wait in the launch for their time (the scheduler may hand calls over
    // ahead): with the copy kernel, once the GPU's clock is known.
    bool holds_words() const { return copy_kernel_ != nullptr && clock_->known(); }

    const char* words_by() const {
        return copy_kernel_ ? "the copy kernel (after the call's pieces)"
               : memops_    ? "stream memory operations"
                            : "8-byte copies from pinned memory";
    }

    // With the copy kernel, a call's copies and words are gathered and go at submit() as launches
    // of it (the words written by the launch itself); with a CUDA tool attached, the driver's copies
    // and stream memory operations go at once (cuda_tool_attached()).
    void copy(const Copy* copies, size_t count) override {
        if (copy_kernel_) {
            pending_copies_.insert(pending_copies_.end(), copies, copies + count);
            return;
        }
        const int64_t start = steady_ns();
        driver_copies(copies, count);
        const int64_t end = steady_ns();
        timing_.copy_call_ns += uint64_t(end - start);
        sample_stream_lag(start, end);
    }
    // The gathered call: its copies cut into pieces of kNetCopyPieceBytes, one launch of the copy
    // kernel per kNetCopyMaxItems pieces, a block per piece up to what the SMs the ranks leave free
    // hold, the words in the launch with the last pieces (net/copy_pieces.hpp).
    // The words wait in the launch until they are due: on the GPU's clock, once the engine can tell
    // it (the scheduler hands calls over ahead only then).
    void submit(int64_t words_due_ns) override {
        if (pending_copies_.empty() && pending_words_.empty()) return;
        const int64_t start = steady_ns();
        args_.blocks_done = copy_blocks_done_;
        args_.words_not_before =
            words_due_ns > 0 && !pending_words_.empty() ? clock_->device_ns(words_due_ns) : 0;
        plan_call(
            pending_copies_.data(), pending_copies_.size(), pending_words_.data(), pending_words_.size(),
            args_,
            [this](const Copy& copy, uint64_t* dst, uint64_t* src) {
                *dst = reinterpret_cast<uint64_t>(windows_[copy.dst_rank] + copy.dst_offset);
                *src = reinterpret_cast<uint64_t>(local_window_ + copy.src_offset);
            },
            [this](const device::NetCopyArgs& args) {
                jit::LaunchConfig config;
                config.grid[0] = unsigned(std::clamp(args.count, 1, kMaxBlocks));
                config.block[0] = unsigned(device::kNetCopyThreads);
                config.stream = stream_;
                jit::launch(*copy_kernel_, config, &args, sizeof(args));
            });
        pending_copies_.clear();
        pending_words_.clear();
        const int64_t end = steady_ns();
        timing_.copy_call_ns += uint64_t(end - start);
        sample_stream_lag(start, end);
    }
    // One cudaMemcpyBatchAsync per call: source read in stream order, the copy engines preferred.
    void driver_copies(const Copy* copies, size_t count) {
        dsts_.resize(count);
        srcs_.resize(count);
        sizes_.resize(count);
        for (size_t i = 0; i < count; ++i) {
            dsts_[i] = windows_[copies[i].dst_rank] + copies[i].dst_offset;
            srcs_[i] = local_window_ + copies[i].src_offset;
            sizes_[i] = copies[i].bytes;
        }
        cudaMemcpyAttributes attributes{};
        attributes.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
        attributes.flags = cudaMemcpyFlagPreferOverlapWithCompute;
        size_t attribute_index = 0;
        SY_CUDA_CHECK(cudaMemcpyBatchAsync(dsts_.data(), srcs_.data(), sizes_.data(), count, &attributes,
                                           &attribute_index, 1, stream_));
    }
    const char* copy_path() const {
        return copy_kernel_ ? "the engine's copy kernel" : "driver copies (a CUDA tool is attached)";
    }
    // The words of one scheduler call: one cuStreamBatchMemOp per 255 (each write fences the
    // stream's earlier writes, the copies, as cuStreamWriteValue64 does), or one write each.
    void write(const Word* words, size_t count) override {
        if (copy_kernel_) {  // written by the call's last launch (submit)
            for (size_t i = 0; i < count; ++i)
                pending_words_.push_back({reinterpret_cast<uint64_t>(address_of(words[i])), words[i].value});
            return;
        }
        const int64_t start = steady_ns();
        size_t done = 0;
        while (batch_memops_ && done < count) {
            const size_t n = std::min(count - done, kMaxBatchOps);
            params_.assign(n, CUstreamBatchMemOpParams{});
            for (size_t i = 0; i < n; ++i) {
                CUstreamBatchMemOpParams& op = params_[i];
                op.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
                op.writeValue.address = reinterpret_cast<CUdeviceptr>(address_of(words[done + i]));
                op.writeValue.value64 = words[done + i].value;
                op.writeValue.flags = CU_STREAM_WRITE_VALUE_DEFAULT;
            }
            const CUresult status = jit::driver().cuStreamBatchMemOp(reinterpret_cast<CUstream>(stream_),
                                                                     unsigned(n), params_.data(), 0);
            if (status == CUDA_SUCCESS) {
                batch_memops_worked_ = true;
                done += n;
                continue;
            }
            if (batch_memops_worked_) jit::check_cu(status, "cuStreamBatchMemOp", "(emulated network)");
            batch_memops_ = false;  // this driver does not batch them: one write per word from now on
        }
        for (; done < count; ++done) write_word(address_of(words[done]), words[done].value);
        const int64_t end = steady_ns();
        timing_.write_call_ns += uint64_t(end - start);
        sample_stream_lag(start, end);
    }
    void write_signal(int32_t dst_rank, int32_t context, uint32_t id, uint64_t value) override {
        write_word(states_[dst_rank] + device::net_signal_word(context, id), value);
    }
    void write_counter(int32_t context, uint32_t id, uint64_t value) override {
        write_word(states_[own_rank_] + device::net_counter_word(context, id), value);
    }
    void write_flush_done(int32_t context, uint64_t value) override {
        write_word(states_[own_rank_] + EmulatedNetState::kFlushDone + context, value);
    }
    // Poisons the buffer (a refused request): the ranks' waits then end at once.
    void poison(uint32_t* word) {
        SY_CUDA_CHECK(cudaMemcpyAsync(word, staging_ + kStagingWords, sizeof(uint32_t),
                                      cudaMemcpyHostToDevice, stream_));
    }
    void set_own_rank(int32_t rank) {
        own_rank_ = rank;
        copy_blocks_done_ =
            reinterpret_cast<uint32_t*>(states_[size_t(rank)] + EmulatedNetState::kCopyBlocksDone);
    }

    // What the engine's stats take from the executor.
    struct Timing {
        uint64_t copy_call_ns = 0, write_call_ns = 0;
        uint64_t stream_lag_samples = 0, stream_lag_ns = 0, stream_lag_max_ns = 0;
    };
    const Timing& timing() const { return timing_; }

    // Stream lag: an event recorded after a call now and then; the engine polls the oldest one
    // and counts from the call to when it saw it done.
    void poll_stream_lag(int64_t now_ns) {
        while (lag_head_ != lag_tail_) {
            LagSample& sample = lag_samples_[lag_head_ % kLagSamples];
            if (cudaEventQuery(sample.event) != cudaSuccess) {
                (void)cudaGetLastError();  // cudaErrorNotReady is not an error
                return;
            }
            const uint64_t lag = uint64_t(std::max<int64_t>(0, now_ns - sample.issued_ns));
            ++timing_.stream_lag_samples;
            timing_.stream_lag_ns += lag;
            timing_.stream_lag_max_ns = std::max(timing_.stream_lag_max_ns, lag);
            ++lag_head_;
        }
    }

  private:
    static constexpr size_t kMaxBatchOps = 255;  // "count must be less than 256"
    static constexpr size_t kLagSamples = 64;
    static constexpr int64_t kLagSampleEveryNs = 50'000;
    struct LagSample {
        cudaEvent_t event = nullptr;
        int64_t issued_ns = 0;
    };

    // Not with a CUDA tool attached: there the engine issues nothing but its copies and words (an
    // event recorded and queried on its stream kept the engine from issuing a call's signals while a
    // peer's kernel waited for them, under compute-sanitizer memcheck, 2026-12-03).
    void sample_stream_lag(int64_t start_ns, int64_t end_ns) {
        if (!copy_kernel_) return;
        if (end_ns - last_lag_sample_ns_ < kLagSampleEveryNs || lag_tail_ - lag_head_ >= kLagSamples) return;
        LagSample& sample = lag_samples_[lag_tail_ % kLagSamples];
        if (!sample.event) SY_CUDA_CHECK(cudaEventCreateWithFlags(&sample.event, cudaEventDisableTiming));
        SY_CUDA_CHECK(cudaEventRecord(sample.event, stream_));
        sample.issued_ns = start_ns;
        last_lag_sample_ns_ = end_ns;
        ++lag_tail_;
    }

    uint64_t* address_of(const Word& word) const {
        switch (word.kind) {
            case Word::kSignal:
                return states_[word.rank] + device::net_signal_word(word.context, word.id);
            case Word::kCounter:
                return states_[own_rank_] + device::net_counter_word(word.context, word.id);
            case Word::kFlushDone:
                break;
        }
        return states_[own_rank_] + EmulatedNetState::kFlushDone + word.context;
    }

    static constexpr size_t kStagingWords = 8192, kGroupWords = 256, kGroups = kStagingWords / kGroupWords;

    void write_word(uint64_t* address, uint64_t value) {
        if (memops_) {
            // The default flags fence the stream's earlier writes (the copies) before this one.
            jit::check_cu(jit::driver().cuStreamWriteValue64(reinterpret_cast<CUstream>(stream_),
                                                             reinterpret_cast<CUdeviceptr>(address), value,
                                                             CU_STREAM_WRITE_VALUE_DEFAULT),
                          "cuStreamWriteValue64", "(emulated network)");
            return;
        }
        // A staging word may be rewritten only once the copy that read it has run: words are used
        // in groups, and a group's event (recorded after its last copy) is waited for before reuse.
        const size_t index = staging_next_ % kStagingWords, group = index / kGroupWords;
        if (index % kGroupWords == 0 && group_recorded_[group])
            SY_CUDA_CHECK(cudaEventSynchronize(group_done_[group]));
        staging_[index] = value;
        SY_CUDA_CHECK(
            cudaMemcpyAsync(address, staging_ + index, sizeof(uint64_t), cudaMemcpyHostToDevice, stream_));
        ++staging_next_;
        if (staging_next_ % kGroupWords == 0) {
            SY_CUDA_CHECK(cudaEventRecord(group_done_[group], stream_));
            group_recorded_[group] = true;
        }
    }

    int device_;
    cudaStream_t stream_;
    uint8_t* local_window_;
    std::vector<uint8_t*> windows_;  // [R] as mapped in this process (null for ranks never reached)
    std::vector<uint64_t*> states_;  // [R] network states as mapped here
    int32_t own_rank_ = 0;
    bool memops_ = false;
    bool batch_memops_ = false;
    bool batch_memops_worked_ = false;
    std::vector<CUstreamBatchMemOpParams> params_;
    Timing timing_;
    LagSample lag_samples_[kLagSamples];
    size_t lag_head_ = 0, lag_tail_ = 0;
    int64_t last_lag_sample_ns_ = 0;
    // Blocks of one launch: what the SMs the ranks leave free per rank hold at once
    // (tuning::kEmulatedNetworkSmsPerRank).
    static constexpr int32_t kMaxBlocks = device::kNetCopyBlocksPerSm * tuning::kEmulatedNetworkSmsPerRank;
    const DeviceClock* clock_;        // the engine's estimate of the GPU's clock
    const jit::Kernel* copy_kernel_;  // null: driver copies
    device::NetCopyArgs args_{};
    uint32_t* copy_blocks_done_ = nullptr;  // the copy kernel's block counter, in this rank's network state
    std::vector<Copy> pending_copies_;      // the call being gathered (copy kernel only)
    std::vector<device::NetCopyWord> pending_words_;
    std::vector<void*> dsts_;
    std::vector<const void*> srcs_;
    std::vector<size_t> sizes_;
    uint64_t* staging_ = nullptr;
    size_t staging_next_ = 0;
    cudaEvent_t group_done_[kGroups] = {};
    bool group_recorded_[kGroups] = {};
};

EmulatedNetwork::EmulatedNetwork(const Setup& setup) : Network(setup.layout, setup.device), setup_(setup) {
    const Topology& topology = *setup.topology;
    rank_ = topology.rank;
    const BufferConfig& config = setup.config;
    SY_CUDA_CHECK(cudaSetDevice(setup.device));

    // This rank's network state, mapped into the other ranks of the host for their engines.
    state_ =
        std::make_unique<comm::SymmetricMemory>(*setup.communicator, topology, setup.device,
                                                static_cast<size_t>(EmulatedNetState::kBytes), setup.timeout);
    {
        const auto rings =
            util::allocate_mapped_host<device::NetDescriptor>(size_t(num_contexts_) * kRingSlots);
        rings_host_ = rings.host;
        rings_device_ = rings.device;
        const auto consumed = util::allocate_mapped_host<uint64_t>(size_t(device::kNetMaxContexts));
        consumed_host_ = consumed.host;
        consumed_device_ = consumed.device;
    }
    ring_ = std::make_unique<DescriptorRing>(rings_host_, consumed_host_, num_contexts_, kRingSlots);

    context_.rings = rings_device_;
    context_.ring_consumed = consumed_device_;
    context_.state = reinterpret_cast<uint64_t*>(state_->local());
    context_.window_bytes = setup.windows->bytes();
    context_.ring_slots = kRingSlots;
    context_.num_contexts = num_contexts_;
    context_.rank = rank_;
    context_.node = layout_.node;
    context_.num_nodes = layout_.num_nodes;
    context_.local_index = layout_.local_index;
    context_.ranks_per_node = layout_.ranks_per_node;

    stream_ = core::acquire_stream(setup.device);
    std::vector<uint8_t*> windows(size_t(topology.num_ranks), nullptr);
    std::vector<uint64_t*> states(size_t(topology.num_ranks), nullptr);
    for (int32_t r = 0; r < topology.num_ranks; ++r) {
        // The engine reaches its rail peers (and itself, for counters and loopback puts) only.
        if (layout_.local_index_of(r) != layout_.local_index) continue;
        windows[r] = setup.windows->peer(r);
        states[r] = reinterpret_cast<uint64_t*>(state_->peer(r));
        if (!windows[r] || !states[r])
            throw UnsupportedError("switchyard: the emulated network of rank " + std::to_string(rank_) +
                                   " cannot map rank " + std::to_string(r) + "'s buffer (not on this host)");
    }
    executor_ = std::make_unique<CudaExecutor>(setup.device, stream_, setup.windows->local(),
                                               std::move(windows), std::move(states), &device_clock_);
    executor_->set_own_rank(rank_);

    SchedulerConfig scheduler;
    scheduler.rank = rank_;
    scheduler.num_nodes = layout_.num_nodes;
    scheduler.ranks_per_node = layout_.ranks_per_node;
    scheduler.num_contexts = num_contexts_;
    scheduler.window_bytes = setup.windows->bytes();
    scheduler.bytes_per_ns = config.network_bandwidth_gbps;  // GB/s = bytes per ns
    scheduler.latency_ns = static_cast<int64_t>(config.network_latency_us * 1e3);
    scheduler.adversarial = config.network_adversarial;
    scheduler.withhold = config.network_withhold_rank == rank_;
    scheduler.seed = 0x5eed + uint64_t(rank_);
    scheduler_ = std::make_unique<Scheduler>(scheduler, *executor_);
    stats_snapshot_ = scheduler_->stats();

    thread_ = std::thread([this] { run(); });
}

EmulatedNetwork::~EmulatedNetwork() {
    shutdown();
    if (rings_host_) cudaFreeHost(rings_host_);
    if (consumed_host_) cudaFreeHost(consumed_host_);
    executor_.reset();
    state_.reset();
}

void EmulatedNetwork::shutdown() {
    if (shut_down_) return;
    shut_down_ = true;
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    cudaSetDevice(setup_.device);
    if (stream_) {
        cudaStreamSynchronize(stream_);  // nothing of this rank's lands anywhere after this
        core::release_stream(setup_.device, stream_);
        stream_ = nullptr;
    }
}

int64_t EmulatedNetwork::pass(int64_t now_ns, bool& took) {
    took = false;
    ++engine_.passes;
    for (int32_t context = 0; context < num_contexts_; ++context) {
        if (!ring_->ready(context)) continue;
        const int64_t seen = steady_ns();
        const int taken = ring_->take(
            context, kMaxTakenPerPass, [&](uint64_t position, const device::NetDescriptor& request) {
                device_clock_.sample(seen, request.posted_ns);
                // The post on the engine's clock (DeviceClock; never after it was seen): the request
                // is due from then, and the ring lag is the time from there to here.
                int64_t posted = now_ns;
                if (request.posted_ns != 0) {
                    posted = std::min(seen, device_clock_.engine_ns(request.posted_ns, seen));
                    ++engine_.ring_lag_samples;
                    engine_.ring_lag_sum += uint64_t(seen - posted);
                    engine_.ring_lag_max = std::max(engine_.ring_lag_max, uint64_t(seen - posted));
                }
                const std::string problem = scheduler_->accept(context, position, request, now_ns, posted);
                if (!problem.empty()) report_refused(context, request, problem);
            });
        engine_.requests += uint64_t(taken);
        if (taken == kMaxTakenPerPass) ++engine_.full_takes;
        took = took || taken > 0;
    }
    if (scheduler_->config().issue_lead_ns == 0 && executor_->holds_words())
        scheduler_->set_issue_lead(kIssueLeadNs);
    return scheduler_->issue(now_ns);
}

void EmulatedNetwork::refresh_stats() {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    stats_snapshot_ = scheduler_->stats();
    const SchedulerStats& s = stats_snapshot_;
    const auto& timing = executor_->timing();
    NetworkEngineStats& e = engine_snapshot_;
    e.passes = engine_.passes;
    e.requests = engine_.requests;
    e.full_takes = engine_.full_takes;
    e.batches = s.batches;
    e.coalesce_waits = s.coalesce_waits;
    e.copy_calls = s.copy_calls;
    e.copy_call_ns = timing.copy_call_ns;
    e.copies = s.copies;
    e.copy_bytes = 0;
    for (uint64_t bytes : s.bytes_delivered) e.copy_bytes += bytes;
    e.write_calls = s.write_calls;
    e.words = s.words;
    e.write_call_ns = timing.write_call_ns;
    e.signal_adds = s.signal_adds;
    e.busy_ns = engine_.busy_ns;
    e.waiting_ns = engine_.waiting_ns;
    e.idle_ns = engine_.idle_ns;
    e.wire_ns = uint64_t(s.wire_ns);
    e.late_ns = uint64_t(s.late_ns);
    e.late_max_ns = uint64_t(s.late_max_ns);
    e.queued_ns = uint64_t(s.queued_ns);
    e.bursts = s.bursts;
    e.burst_gaps = s.burst_gaps;
    e.burst_idle_ns = uint64_t(s.burst_idle_ns);
    e.ring_lag_samples = engine_.ring_lag_samples;
    e.ring_lag_ns = engine_.ring_lag_sum;
    e.ring_lag_max_ns = engine_.ring_lag_max;
    e.stream_lag_samples = timing.stream_lag_samples;
    e.stream_lag_ns = timing.stream_lag_ns;
    e.stream_lag_max_ns = timing.stream_lag_max_ns;
}

void EmulatedNetwork::run() {
    if (cudaSetDevice(setup_.device) != cudaSuccess) {
        failed_ = true;
        return;
    }
    // A capture in global mode on another thread (a framework capturing its step) must not make
    // this thread's stream queries and copies on its own, uncaptured stream illegal.
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    int64_t last_activity = steady_ns(), last_refresh = 0;
    bool had_work = false;
    // The loop's time goes to what the previous pass was: busy, waiting for due work, or idle.
    int64_t iteration_start = steady_ns();
    uint64_t* iteration_bucket = &engine_.idle_ns;
    while (!stop_.load(std::memory_order_acquire)) {
        const int64_t now = steady_ns();
        *iteration_bucket += uint64_t(now - iteration_start);
        iteration_start = now;
        iteration_bucket = &engine_.idle_ns;
        if (pause_requested_.load(std::memory_order_acquire)) {
            paused_.store(true, std::memory_order_release);
            while (pause_requested_.load(std::memory_order_acquire) && !stop_.load(std::memory_order_acquire))
                std::this_thread::sleep_for(std::chrono::microseconds(20));
            paused_.store(false, std::memory_order_release);
            last_activity = steady_ns();
            iteration_start = last_activity;
            continue;
        }
        int64_t due = kNever;
        bool took = false;
        const uint64_t calls_before = scheduler_->stats().copy_calls + scheduler_->stats().write_calls;
        if (!failed_.load(std::memory_order_relaxed)) {
            try {
                due = pass(now, took);
                executor_->poll_stream_lag(steady_ns());
            } catch (const std::exception& error) {
                std::lock_guard<std::mutex> lock(stats_mutex_);
                failure_ = error.what();
                failed_ = true;
                std::fprintf(stderr, "[switchyard] rank %d: the emulated network's engine stopped: %s\n",
                             rank_, error.what());
            }
        }
        const bool issued = scheduler_->stats().copy_calls + scheduler_->stats().write_calls != calls_before;
        if (issued) last_issue_ns_.store(steady_ns(), std::memory_order_relaxed);
        const uint64_t number = pass_count_.fetch_add(1, std::memory_order_acq_rel) + 1;
        const bool pending = scheduler_->has_pending();
        iteration_bucket = took || issued ? &engine_.busy_ns
                           : pending      ? &engine_.waiting_ns
                                          : &engine_.idle_ns;
        // Accounting for stats(): refreshed now and then while there is work, and once after it
        // (before the pass that tells drain() the network is quiet).
        if (((took || pending) && now - last_refresh >= kStatsRefreshNs) || (had_work && !took && !pending)) {
            refresh_stats();
            last_refresh = now;
        }
        had_work = took || pending;
        if (took) last_activity = now;
        if (!took && !pending && cudaStreamQuery(stream_) == cudaSuccess)
            quiet_pass_.store(number, std::memory_order_release);
        if (took) continue;
        // Nothing new: wait for the next due work, spinning while the network is in use (a 3 us
        // latency cannot be slept) and polling slowly once it has been idle for a while.
        const int64_t after = steady_ns();
        if (due != kNever && due <= after) continue;
        last_activity = std::max(last_activity, expected_ns_.load());
        if (!pending && after - last_activity > kSpinAfterActivityNs) {
            std::unique_lock<std::mutex> lock(wake_mutex_);
            sleeping_.store(true);
            wake_.wait_for(lock, kIdlePoll, [&] { return expected_ns_.load() > last_activity; });
            sleeping_.store(false);
        } else {
            std::this_thread::yield();
        }
    }
}

void EmulatedNetwork::expect_traffic() {
    expected_ns_.store(steady_ns());
    if (sleeping_.load()) {
        std::lock_guard<std::mutex> lock(wake_mutex_);
        wake_.notify_one();
    }
}

void EmulatedNetwork::report_refused(int32_t context, const device::NetDescriptor& request,
                                     const std::string& problem) {
    if (!reported_refusal_) {
        reported_refusal_ = true;
        std::fprintf(stderr, "[switchyard] rank %d: the emulated network refused a request: %s\n", rank_,
                     problem.c_str());
    }
    device::ErrorRecord* record = setup_.host_record;
    if (record && reinterpret_cast<volatile device::ErrorRecord*>(record)->kind == device::kErrorNone) {
        record->rank = rank_;
        record->peer = request.peer_node >= 0 && request.peer_node < layout_.num_nodes
                           ? layout_.rail_peer(request.peer_node)
                           : -1;
        record->phase = device::kPhaseNetwork;
        record->expected = setup_.windows->bytes();
        record->observed = request.dst_offset + request.bytes;
        record->elapsed_ns = 0;
        record->detail[device::kNetDetailPeerNode] = request.peer_node;
        record->detail[device::kNetDetailId] =
            request.signal_id == device::kNetNone ? -1 : int64_t(request.signal_id);
        record->detail[device::kNetDetailContext] = context;
        record->detail[device::kNetDetailWhat] = 0;  // refused by the engine (the kernel checks first)
        record->detail[device::kNetDetailTransport] = device::kNetTransportMarker;
        std::atomic_thread_fence(std::memory_order_release);
        reinterpret_cast<volatile device::ErrorRecord*>(record)->kind = device::kErrorNetworkRequest;
    }
    if (setup_.poison) executor_->poison(setup_.poison);
}

bool EmulatedNetwork::drain(std::chrono::milliseconds timeout) {
    if (failed_.load()) return false;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    // Two passes that begin after this call: the first one may have started before the caller's
    // last kernel published its requests.
    const uint64_t target = pass_count_.load(std::memory_order_acquire) + 2;
    while (std::chrono::steady_clock::now() < deadline) {
        if (failed_.load()) return false;
        if (quiet_pass_.load(std::memory_order_acquire) >= target) return true;
        std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    return false;
}

void EmulatedNetwork::pause() {
    pause_requested_.store(true, std::memory_order_release);
    while (!paused_.load(std::memory_order_acquire) && thread_.joinable() && !stop_.load())
        std::this_thread::sleep_for(std::chrono::microseconds(20));
}

void EmulatedNetwork::unpause() {
    pause_requested_.store(false, std::memory_order_release);
}

void EmulatedNetwork::stop_for_reset(std::chrono::milliseconds) {
    pause();
    // What is queued is dropped; what is in the stream lands before this returns.
    scheduler_->clear();
    SY_CUDA_CHECK(cudaSetDevice(setup_.device));
    SY_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void EmulatedNetwork::clear_for_reset() {
    // Every rank's engine has stopped (the ranks passed a barrier since stop_for_reset) and no
    // kernel runs: rings, positions and state start over.
    ring_->clear();
    SY_CUDA_CHECK(cudaSetDevice(setup_.device));
    SY_CUDA_CHECK(
        cudaMemsetAsync(state_->local(), 0, static_cast<size_t>(EmulatedNetState::kBytes), stream_));
    SY_CUDA_CHECK(cudaStreamSynchronize(stream_));
    {
        std::lock_guard<std::mutex> lock(stats_mutex_);
        failure_.clear();
    }
    reported_refusal_ = false;
    failed_ = false;
    scheduler_->stop_withholding();  // a withheld rank's network comes back with the reset
    check_ = CheckState{check_.results_device, check_.results_host};
}

void EmulatedNetwork::resume_after_reset() {
    unpause();
}

std::string EmulatedNetwork::failure() const {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    return failure_;
}

std::string EmulatedNetwork::pending_note() const {
    if (!stream_ || shut_down_) return {};
    const cudaError_t status = cudaStreamQuery(stream_);
    if (status != cudaErrorNotReady) return {};
    (void)cudaGetLastError();  // not ready is not an error
    const double age_s = double(steady_ns() - last_issue_ns_.load(std::memory_order_relaxed)) * 1e-9;
    char text[160];
    std::snprintf(
        text, sizeof text,
        "its copy stream has not yet run all it was given (the latest %.3f s ago): deliveries issued "
        "but waiting for the GPU",
        age_s);
    return text;
}

NetworkStats EmulatedNetwork::stats() const {
    NetworkStats out;
    out.backend = "emulated";
    out.num_nodes = layout_.num_nodes;
    out.ranks_per_node = layout_.ranks_per_node;
    out.node = layout_.node;
    out.local_index = layout_.local_index;
    out.accounted = true;
    out.signal_writes = executor_->words_by();
    out.copies_by = executor_->copy_path();
    std::lock_guard<std::mutex> lock(stats_mutex_);
    out.bytes_to_rank = stats_snapshot_.bytes_delivered;
    out.bytes_requested_to_rank = stats_snapshot_.bytes_requested;
    out.puts_to_rank = stats_snapshot_.puts;
    out.signals_to_rank = stats_snapshot_.signals;
    out.copies = stats_snapshot_.copies;
    out.flushes = stats_snapshot_.flushes;
    out.bytes_withheld = stats_snapshot_.bytes_withheld;
    out.invalid_requests = stats_snapshot_.invalid_requests;
    out.engine = engine_snapshot_;
    return out;
}

}  // namespace switchyard::net
