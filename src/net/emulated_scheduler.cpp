// The emulated network's scheduling logic (see emulated_scheduler.hpp).
#include "net/emulated_scheduler.hpp"

#include <algorithm>
#include <cmath>

#include "switchyard/config.hpp"

namespace switchyard::net {

using device::kNetMaxContexts;
using device::kNetNone;
using device::kNetNumCounters;
using device::kNetNumSignals;

Scheduler::Scheduler(const SchedulerConfig& config, Executor& executor)
    : config_(config), executor_(executor), random_(config.seed * 0x9e3779b97f4a7c15ull + uint64_t(config.rank)) {
    const int32_t num_ranks = config_.num_nodes * config_.ranks_per_node;
    contexts_.resize(static_cast<size_t>(config_.num_contexts));
    for (ContextState& context : contexts_) {
        context.lanes.resize(static_cast<size_t>(config_.num_nodes));
        for (int32_t node = 0; node < config_.num_nodes; ++node) {
            context.lanes[node].context = int32_t(&context - contexts_.data());
            context.lanes[node].peer_node = node;
        }
    }
    signal_values_.assign(size_t(config_.num_nodes) * kNetNumSignals, 0);
    signal_context_.assign(size_t(config_.num_nodes) * kNetNumSignals, -1);
    counter_values_.assign(kNetNumCounters, 0);
    counter_context_.assign(kNetNumCounters, -1);
    flush_reported_.assign(size_t(config_.num_contexts), 0);
    stats_.bytes_requested.assign(size_t(num_ranks), 0);
    stats_.bytes_delivered.assign(size_t(num_ranks), 0);
    stats_.puts.assign(size_t(num_ranks), 0);
    stats_.signals.assign(size_t(num_ranks), 0);
}

std::string Scheduler::accept(int32_t context_index, uint64_t position, const device::NetDescriptor& d,
                              int64_t now_ns) {
    last_request_ns_ = now_ns;
    auto refuse = [&](const std::string& why) {
        ++stats_.invalid_requests;
        return "request at position " + std::to_string(position) + " of context " + std::to_string(context_index) +
               ": " + why;
    };
    if (context_index < 0 || context_index >= config_.num_contexts) return refuse("no such context");
    ContextState& context = contexts_[context_index];
    if (d.kind == device::kNetRequestFlush) {
        context.flushes.push_back(position);
        context.force_below = std::max(context.force_below, position);
        ++stats_.flushes;
        return {};
    }
    if (d.kind != device::kNetRequestPut && d.kind != device::kNetRequestSignal)
        return refuse("unknown kind " + std::to_string(d.kind));
    if (d.peer_node < 0 || d.peer_node >= config_.num_nodes)
        return refuse("peer node " + std::to_string(d.peer_node) + " outside [0, " +
                      std::to_string(config_.num_nodes) + ")");
    const uint64_t bytes = d.kind == device::kNetRequestPut ? d.bytes : 0;
    const uint64_t window = config_.window_bytes;
    if (d.kind == device::kNetRequestPut &&
        (d.dst_offset > window || bytes > window - d.dst_offset || d.src_offset > window ||
         bytes > window - d.src_offset))
        return refuse("bytes [" + std::to_string(d.src_offset) + ", +" + std::to_string(bytes) + ") -> [" +
                      std::to_string(d.dst_offset) + ", +" + std::to_string(bytes) + ") outside the " +
                      std::to_string(window) + "-byte window");
    if (d.signal_id != kNetNone && d.signal_id >= uint32_t(kNetNumSignals))
        return refuse("signal " + std::to_string(d.signal_id) + " >= " + std::to_string(kNetNumSignals));
    if (d.counter_id != kNetNone && (d.counter_id >= uint32_t(kNetNumCounters) || d.kind != device::kNetRequestPut))
        return refuse("counter " + std::to_string(d.counter_id) + " invalid for this request");
    if (d.kind == device::kNetRequestSignal && d.signal_id == kNetNone) return refuse("a signal request without a signal");
    // An id belongs to one context (GIN keeps them per context): refuse one raised on two.
    if (d.signal_id != kNetNone) {
        int32_t& owner = signal_context_[size_t(d.peer_node) * kNetNumSignals + d.signal_id];
        if (owner >= 0 && owner != context_index)
            return refuse("signal " + std::to_string(d.signal_id) + " of node " + std::to_string(d.peer_node) +
                          " was raised on context " + std::to_string(owner) +
                          " before; a signal id belongs to one context");
        owner = context_index;
    }
    if (d.counter_id != kNetNone) {
        int32_t& owner = counter_context_[d.counter_id];
        if (owner >= 0 && owner != context_index)
            return refuse("counter " + std::to_string(d.counter_id) + " was used on context " + std::to_string(owner) +
                          " before; a counter id belongs to one context");
        owner = context_index;
    }

    Request request;
    request.position = position;
    request.ready_ns = now_ns + config_.latency_ns;
    request.kind = d.kind;
    request.dst_offset = d.dst_offset;
    request.src_offset = d.src_offset;
    request.bytes = bytes;
    request.signal_id = d.signal_id;
    request.signal_value = d.signal_value;
    request.counter_id = d.counter_id;
    const int32_t dst_rank = d.peer_node * config_.ranks_per_node + (config_.rank % config_.ranks_per_node);
    if (d.kind == device::kNetRequestPut) {
        ++stats_.puts[dst_rank];
        stats_.bytes_requested[dst_rank] += bytes;
    }
    context.lanes[d.peer_node].waiting.push_back(request);
    return {};
}

bool Scheduler::wire_allows(Batch& batch, uint64_t bytes, int64_t now_ns, int64_t& next_due) {
    if (config_.bytes_per_ns <= 0) return true;
    if (batch.next_chunk_wire_end < 0) {
        // The wire takes this chunk after the ones reserved before it (or now, if it is idle).
        wire_free_ns_ = std::max(wire_free_ns_, double(now_ns)) + double(bytes) / config_.bytes_per_ns;
        batch.next_chunk_wire_end = wire_free_ns_;
    }
    if (batch.next_chunk_wire_end <= double(now_ns + config_.issue_horizon_ns)) return true;
    // Wake when its slot ends: the chunks whose slots end within the horizon after it go along.
    next_due = std::min(next_due, int64_t(std::ceil(batch.next_chunk_wire_end)));
    return false;
}

void Scheduler::form_batch(ContextState& context, Lane& lane, int64_t now_ns, int64_t& next_due) {
    if (lane.waiting.empty()) return;
    // The due prefix, up to and including the first signal: a signal closes its batch.
    size_t count = 0;
    bool closed = false;
    while (count < lane.waiting.size() && lane.waiting[count].ready_ns <= now_ns) {
        const bool signals = lane.waiting[count].signal_id != kNetNone;
        ++count;
        if (signals) {
            closed = true;
            break;
        }
    }
    if (count < lane.waiting.size() && !closed) next_due = std::min(next_due, lane.waiting[count].ready_ns);
    if (count == 0) return;
    if (adversarial(kNetworkLateSourceReads) && !closed) {
        // Hold unsignalled puts until something forces them: an idle network lets everything go,
        // a flush the positions before it.
        const int64_t release_at = last_request_ns_ + config_.hold_idle_ns;
        if (now_ns < release_at) {
            size_t forced = 0;
            while (forced < count && lane.waiting[forced].position < context.force_below) ++forced;
            if (forced == 0) {
                next_due = std::min(next_due, release_at);
                return;
            }
            count = forced;
            next_due = std::min(next_due, release_at);
        }
    }

    Batch& batch = lane.batch;
    batch = Batch{};
    batch.active = true;
    batch.first_position = lane.waiting.front().position;
    const int32_t dst_rank = lane.peer_node * config_.ranks_per_node + (config_.rank % config_.ranks_per_node);
    std::vector<Executor::Copy> puts;
    for (size_t i = 0; i < count; ++i) {
        const Request& request = lane.waiting[i];
        if (request.bytes > 0) puts.push_back({dst_rank, request.dst_offset, request.src_offset, request.bytes});
        if (request.counter_id != kNetNone) {
            auto found = std::find_if(batch.counter_adds.begin(), batch.counter_adds.end(),
                                      [&](const auto& add) { return add.first == request.counter_id; });
            if (found == batch.counter_adds.end())
                batch.counter_adds.push_back({request.counter_id, 1});
            else
                ++found->second;
        }
        if (request.signal_id != kNetNone) {  // only the last request of a batch carries one
            batch.has_signal = true;
            batch.signal_id = request.signal_id;
            batch.signal_add = request.signal_value;
        }
    }
    lane.waiting.erase(lane.waiting.begin(), lane.waiting.begin() + std::ptrdiff_t(count));

    if (adversarial(kNetworkReorderPuts)) {
        std::shuffle(puts.begin(), puts.end(), random_);
    } else if (!puts.empty()) {
        std::stable_sort(puts.begin(), puts.end(),
                         [](const Executor::Copy& a, const Executor::Copy& b) { return a.src_offset < b.src_offset; });
        std::vector<Executor::Copy> merged{puts.front()};
        for (size_t i = 1; i < puts.size(); ++i) {
            Executor::Copy& last = merged.back();
            if (puts[i].src_offset == last.src_offset + last.bytes && puts[i].dst_offset == last.dst_offset + last.bytes)
                last.bytes += puts[i].bytes;
            else
                merged.push_back(puts[i]);
        }
        puts.swap(merged);
    }
    for (const Executor::Copy& put : puts)
        for (uint64_t done = 0; done < put.bytes; done += config_.chunk_bytes) {
            const uint64_t bytes = std::min<uint64_t>(config_.chunk_bytes, put.bytes - done);
            batch.chunks.push_back({put.dst_rank, put.dst_offset + done, put.src_offset + done, bytes});
        }
    if (adversarial(kNetworkContextsOutOfOrder) && config_.max_context_stall_ns > 0) {
        std::uniform_int_distribution<int64_t> stall(0, config_.max_context_stall_ns);
        context.stalled_until = now_ns + stall(random_);
    }
}

bool Scheduler::issue_batch(Lane& lane, int32_t dst_rank, int64_t now_ns, int64_t& next_due) {
    Batch& batch = lane.batch;
    // The chunks the bucket pays for now, in one executor call.
    const size_t first = batch.next_chunk;
    while (batch.next_chunk < batch.chunks.size()) {
        const uint64_t bytes = batch.chunks[batch.next_chunk].bytes;
        if (!config_.withhold && !wire_allows(batch, bytes, now_ns, next_due)) break;
        ++batch.next_chunk;
        batch.next_chunk_wire_end = -1;
    }
    if (batch.next_chunk > first) {
        uint64_t bytes = 0;
        for (size_t i = first; i < batch.next_chunk; ++i) bytes += batch.chunks[i].bytes;
        if (config_.withhold) {
            stats_.bytes_withheld += bytes;
        } else {
            executor_.copy(batch.chunks.data() + first, batch.next_chunk - first);
            stats_.copies += batch.next_chunk - first;
            stats_.bytes_delivered[dst_rank] += bytes;
        }
    }
    if (batch.next_chunk < batch.chunks.size()) return false;
    // Everything copied (in the executor's queue before what follows): counters, then the signal.
    for (const auto& [id, increments] : batch.counter_adds) {
        counter_values_[id] += increments;
        executor_.write_counter(lane.context, id, counter_values_[id]);
    }
    if (batch.has_signal && !config_.withhold) {
        uint64_t& value = signal_values_[size_t(lane.peer_node) * kNetNumSignals + batch.signal_id];
        value += batch.signal_add;
        executor_.write_signal(dst_rank, lane.context, batch.signal_id, value);
        ++stats_.signals[dst_rank];
    }
    batch = Batch{};
    return true;
}

uint64_t Scheduler::first_unissued(const ContextState& context) const {
    uint64_t first = UINT64_MAX;
    for (const Lane& lane : context.lanes) {
        if (lane.batch.active) first = std::min(first, lane.batch.first_position);
        if (!lane.waiting.empty()) first = std::min(first, lane.waiting.front().position);
    }
    return first;
}

void Scheduler::complete_flushes(int32_t context_index) {
    ContextState& context = contexts_[context_index];
    if (context.flushes.empty()) return;
    const uint64_t first = first_unissued(context);
    uint64_t reported = 0;
    while (!context.flushes.empty() && context.flushes.front() < first) {
        reported = context.flushes.front() + 1;
        context.flushes.pop_front();
    }
    if (reported > flush_reported_[context_index]) {
        flush_reported_[context_index] = reported;
        executor_.write_flush_done(context_index, reported);
    }
}

int64_t Scheduler::issue(int64_t now_ns) {
    int64_t next_due = kNever;
    const int32_t num_contexts = config_.num_contexts, num_nodes = config_.num_nodes;
    const bool reverse = adversarial(kNetworkContextsOutOfOrder);
    // Round robin over contexts and lanes, starting elsewhere on every call, one batch (or what
    // the bucket pays of it) per lane and pass: no lane starves another when the wire is the limit.
    ++rotation_;
    bool progress = true, paced_out = false;
    while (progress && !paced_out) {
        progress = false;
        for (int32_t step = 0; step < num_contexts && !paced_out; ++step) {
            const int32_t ordinal = int32_t((uint64_t(step) + rotation_) % uint64_t(num_contexts));
            ContextState& context = contexts_[reverse ? num_contexts - 1 - ordinal : ordinal];
            for (int32_t l = 0; l < num_nodes; ++l) {
                if (context.stalled_until > now_ns) {
                    next_due = std::min(next_due, context.stalled_until);
                    break;
                }
                Lane& lane = context.lanes[size_t((uint64_t(l) + rotation_) % uint64_t(num_nodes))];
                if (!lane.batch.active) form_batch(context, lane, now_ns, next_due);
                if (!lane.batch.active) continue;
                const size_t before = lane.batch.next_chunk;
                const int32_t dst_rank = lane.peer_node * config_.ranks_per_node + (config_.rank % config_.ranks_per_node);
                const bool done = issue_batch(lane, dst_rank, now_ns, next_due);
                if (done || lane.batch.next_chunk > before) progress = true;
                if (!done) {
                    paced_out = true;
                    break;
                }
            }
        }
    }
    for (int32_t index = 0; index < num_contexts; ++index) complete_flushes(index);
    return next_due;
}

bool Scheduler::has_pending() const {
    for (const ContextState& context : contexts_) {
        if (!context.flushes.empty()) return true;
        for (const Lane& lane : context.lanes)
            if (lane.batch.active || !lane.waiting.empty()) return true;
    }
    return false;
}

void Scheduler::clear() {
    for (ContextState& context : contexts_) {
        for (Lane& lane : context.lanes) {
            lane.waiting.clear();
            lane.batch = Batch{};
        }
        context.flushes.clear();
        context.force_below = 0;
        context.stalled_until = 0;
    }
    std::fill(signal_values_.begin(), signal_values_.end(), 0);
    std::fill(signal_context_.begin(), signal_context_.end(), -1);
    std::fill(counter_values_.begin(), counter_values_.end(), 0);
    std::fill(counter_context_.begin(), counter_context_.end(), -1);
    std::fill(flush_reported_.begin(), flush_reported_.end(), 0);
    wire_free_ns_ = 0;
}

}  // namespace switchyard::net
