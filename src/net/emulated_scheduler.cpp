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

void Executor::write(const Word* words, size_t count) {
    for (size_t i = 0; i < count; ++i) {
        const Word& word = words[i];
        switch (word.kind) {
            case Word::kSignal:
                write_signal(word.rank, word.context, word.id, word.value);
                break;
            case Word::kCounter:
                write_counter(word.context, word.id, word.value);
                break;
            case Word::kFlushDone:
                write_flush_done(word.context, word.value);
                break;
        }
    }
}

Scheduler::Scheduler(const SchedulerConfig& config, Executor& executor)
    : config_(config),
      executor_(executor),
      random_(config.seed * 0x9e3779b97f4a7c15ull + uint64_t(config.rank)) {
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
    signal_word_.assign(size_t(config_.num_nodes) * kNetNumSignals, 0);
    counter_word_.assign(kNetNumCounters, 0);
    flush_word_.assign(size_t(config_.num_contexts), 0);
    stats_.bytes_requested.assign(size_t(num_ranks), 0);
    stats_.bytes_delivered.assign(size_t(num_ranks), 0);
    stats_.puts.assign(size_t(num_ranks), 0);
    stats_.signals.assign(size_t(num_ranks), 0);
}

std::string Scheduler::accept(int32_t context_index, uint64_t position, const device::NetDescriptor& d,
                              int64_t now_ns, int64_t posted_ns) {
    last_request_ns_ = now_ns;
    auto refuse = [&](const std::string& why) {
        ++stats_.invalid_requests;
        return "request at position " + std::to_string(position) + " of context " +
               std::to_string(context_index) + ": " + why;
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
    if (d.kind == device::kNetRequestPut && (d.dst_offset > window || bytes > window - d.dst_offset ||
                                             d.src_offset > window || bytes > window - d.src_offset))
        return refuse("bytes [" + std::to_string(d.src_offset) + ", +" + std::to_string(bytes) + ") -> [" +
                      std::to_string(d.dst_offset) + ", +" + std::to_string(bytes) + ") outside the " +
                      std::to_string(window) + "-byte window");
    if (d.signal_id != kNetNone && d.signal_id >= uint32_t(kNetNumSignals))
        return refuse("signal " + std::to_string(d.signal_id) + " >= " + std::to_string(kNetNumSignals));
    if (d.counter_id != kNetNone &&
        (d.counter_id >= uint32_t(kNetNumCounters) || d.kind != device::kNetRequestPut))
        return refuse("counter " + std::to_string(d.counter_id) + " invalid for this request");
    if (d.kind == device::kNetRequestSignal && d.signal_id == kNetNone)
        return refuse("a signal request without a signal");
    // An id belongs to one context (GIN keeps them per context): refuse one raised on two.
    if (d.signal_id != kNetNone) {
        int32_t& owner = signal_context_[size_t(d.peer_node) * kNetNumSignals + d.signal_id];
        if (owner >= 0 && owner != context_index)
            return refuse("signal " + std::to_string(d.signal_id) + " of node " +
                          std::to_string(d.peer_node) + " was raised on context " + std::to_string(owner) +
                          " before; a signal id belongs to one context");
        owner = context_index;
    }
    if (d.counter_id != kNetNone) {
        int32_t& owner = counter_context_[d.counter_id];
        if (owner >= 0 && owner != context_index)
            return refuse("counter " + std::to_string(d.counter_id) + " was used on context " +
                          std::to_string(owner) + " before; a counter id belongs to one context");
        owner = context_index;
    }

    Lane& lane = context.lanes[d.peer_node];
    Request request;
    request.position = position;
    // From the post (a NIC sees its doorbell at once; the engine's ring lag is the emulator's own),
    // in the lane's order.
    request.ready_ns = std::max(lane.last_ready_ns, posted_ns + config_.latency_ns);
    request.kind = d.kind;
    request.dst_offset = d.dst_offset;
    request.src_offset = d.src_offset;
    request.bytes = bytes;
    request.signal_id = d.signal_id;
    request.signal_value = d.signal_value;
    request.counter_id = d.counter_id;
    const int32_t dst_rank = d.peer_node * config_.ranks_per_node + (config_.rank % config_.ranks_per_node);
    ++stats_.requests;
    if (d.kind == device::kNetRequestPut) {
        ++stats_.puts[dst_rank];
        stats_.bytes_requested[dst_rank] += bytes;
    }
    lane.waiting.push_back(request);
    lane.waiting_bytes += bytes;
    lane.last_seen_ns = now_ns;
    lane.last_ready_ns = request.ready_ns;
    return {};
}

bool Scheduler::wire_allows(Batch& batch, uint64_t bytes, int64_t now_ns, int64_t& next_due) {
    if (config_.bytes_per_ns <= 0) return true;
    if (batch.next_chunk_wire_end < 0) {
        // The wire takes this chunk after the ones reserved before it, or from when its batch
        // became due if it was idle then: never from when the engine got here, so an engine that
        // is late loses no wire time (it issues what is overdue at once).
        const double wire = double(bytes) / config_.bytes_per_ns;
        const double start = std::max(wire_free_ns_, double(batch.ready_ns));
        if (wire_free_ns_ < 0 || start - wire_free_ns_ >= kBurstGapNs) {
            ++stats_.bursts;
        } else if (start > wire_free_ns_) {
            ++stats_.burst_gaps;
            stats_.burst_idle_ns += start - wire_free_ns_;
        }
        wire_free_ns_ = start + wire;
        batch.next_chunk_wire_end = wire_free_ns_;
        stats_.wire_ns += wire;
    }
    const double end = batch.next_chunk_wire_end;
    if (end <= double(now_ns + config_.issue_horizon_ns + config_.issue_lead_ns)) {
        if (config_.issue_lead_ns == 0 || call_first_end_ < 0 ||
            end <= std::max(call_first_end_, double(now_ns)) + double(config_.issue_horizon_ns))
            return true;
        next_due = std::min(next_due, now_ns);  // it goes in the next call, at once
        return false;
    }
    // Wake when it may go: the chunks whose slots end within the horizon after it go along.
    next_due = std::min(next_due, int64_t(std::ceil(end)) - config_.issue_lead_ns);
    return false;
}

int64_t Scheduler::wire_busy_until(int64_t now_ns) const {
    // The wire is free for a new batch once what it carries ends within the issue horizon.
    if (config_.bytes_per_ns <= 0 || config_.withhold) return now_ns;
    const int64_t free_at =
        int64_t(std::ceil(wire_free_ns_)) - config_.issue_horizon_ns - config_.issue_lead_ns;
    return std::max(free_at, now_ns);
}

void Scheduler::form_batch(ContextState& context, Lane& lane, int64_t now_ns, int64_t& next_due) {
    if (lane.waiting.empty()) return;
    // Requests whose latency ends within the lead may go: their words wait for their slots.
    const int64_t ahead_ns = now_ns + config_.issue_lead_ns;
    const Request& front = lane.waiting.front();
    if (front.ready_ns > ahead_ns) {
        next_due = std::min(next_due, front.ready_ns - config_.issue_lead_ns);
        return;
    }
    // Coalescing: while requests keep coming, wait for a full batch or the oldest's deadline (a
    // flush waiting on the lane does not wait).
    const int64_t deadline = front.ready_ns + config_.coalesce_ns;
    const int64_t quiet_at = lane.last_seen_ns + config_.quiet_ns;
    if (lane.waiting_bytes < config_.batch_bytes && now_ns < deadline && now_ns < quiet_at &&
        front.position >= context.force_below) {
        next_due = std::min(next_due, std::min(deadline, quiet_at));
        ++stats_.coalesce_waits;
        return;
    }
    const bool late_reads = adversarial(kNetworkLateSourceReads);
    // The due prefix, signals and all, as long as its payload fits `batch_bytes` (at least one
    // request; late reads: up to a signal, which may lie past that).
    constexpr size_t kNone = SIZE_MAX;
    size_t count = 0, last_signal = kNone;
    uint64_t bytes = 0;
    // Those due by now, or by when the front is (ahead of time): a request that becomes due later
    // must not hold the batch's wire slot back.
    const int64_t cutoff_ns = std::max(now_ns, front.ready_ns);
    while (count < lane.waiting.size() && lane.waiting[count].ready_ns <= cutoff_ns) {
        if (count > 0 && bytes + lane.waiting[count].bytes > config_.batch_bytes &&
            (!late_reads || last_signal != kNone))
            break;
        bytes += lane.waiting[count].bytes;
        if (lane.waiting[count].signal_id != kNetNone) last_signal = count;
        ++count;
    }
    if (count < lane.waiting.size() && lane.waiting[count].ready_ns > cutoff_ns)
        next_due = std::min(next_due, std::max(now_ns, lane.waiting[count].ready_ns - config_.issue_lead_ns));
    if (late_reads) {
        if (last_signal != kNone) {
            count = last_signal + 1;  // the puts after the last signal wait for a later one
        } else {
            // Hold unsignalled puts until something forces them: an idle network lets everything
            // go, a flush the positions before it.
            const int64_t release_at = last_request_ns_ + config_.hold_idle_ns;
            if (now_ns < release_at) {
                size_t forced = 0;
                while (forced < count && lane.waiting[forced].position < context.force_below) ++forced;
                next_due = std::min(next_due, release_at);
                if (forced == 0) return;
                count = forced;
            }
        }
    }

    Batch& batch = lane.batch;
    batch.reset();
    batch.active = true;
    batch.first_position = lane.waiting.front().position;
    ++stats_.batches;
    const int32_t dst_rank =
        lane.peer_node * config_.ranks_per_node + (config_.rank % config_.ranks_per_node);
    puts_.clear();
    uint64_t taken_bytes = 0;
    for (size_t i = 0; i < count; ++i) {
        const Request& request = lane.waiting[i];
        taken_bytes += request.bytes;
        batch.ready_ns = std::max(batch.ready_ns, request.ready_ns);
        if (request.bytes > 0)
            puts_.push_back({{dst_rank, request.dst_offset, request.src_offset, request.bytes}, uint32_t(i)});
    }

    // Copies: shuffled (reorder mode) or sorted by source and coalesced; each put remembers its copy.
    merged_.clear();
    merged_of_put_.assign(count, kNone);
    if (adversarial(kNetworkReorderPuts)) {
        std::shuffle(puts_.begin(), puts_.end(), random_);
        for (const Put& put : puts_) {
            merged_of_put_[put.request] = merged_.size();
            merged_.push_back(put.copy);
        }
    } else if (!puts_.empty()) {
        std::sort(puts_.begin(), puts_.end(), [](const Put& a, const Put& b) {
            return a.copy.src_offset != b.copy.src_offset ? a.copy.src_offset < b.copy.src_offset
                                                          : a.request < b.request;
        });
        for (const Put& put : puts_) {
            if (!merged_.empty()) {
                Executor::Copy& last = merged_.back();
                if (put.copy.src_offset == last.src_offset + last.bytes &&
                    put.copy.dst_offset == last.dst_offset + last.bytes) {
                    last.bytes += put.copy.bytes;
                    merged_of_put_[put.request] = merged_.size() - 1;
                    continue;
                }
            }
            merged_of_put_[put.request] = merged_.size();
            merged_.push_back(put.copy);
        }
    }
    first_chunk_.clear();
    for (const Executor::Copy& copy : merged_) {
        first_chunk_.push_back(batch.chunks.size());
        for (uint64_t done = 0; done < copy.bytes; done += config_.chunk_bytes) {
            const uint64_t size = std::min<uint64_t>(config_.chunk_bytes, copy.bytes - done);
            batch.chunks.push_back({copy.dst_rank, copy.dst_offset + done, copy.src_offset + done, size});
        }
    }

    // What each completion needs: a counter the chunks holding its put (its source read); a signal
    // those of its own put and of every earlier request of the batch (earlier batches of the lane
    // were issued before this one).
    size_t prefix_need = 0;
    for (size_t i = 0; i < count; ++i) {
        const Request& request = lane.waiting[i];
        size_t need = 0;
        if (request.bytes > 0) {
            const size_t m = merged_of_put_[i];
            const uint64_t last_byte = request.src_offset + request.bytes - 1 - merged_[m].src_offset;
            need = first_chunk_[m] + size_t(last_byte / config_.chunk_bytes) + 1;
        }
        prefix_need = std::max(prefix_need, need);
        if (request.counter_id != kNetNone) batch.completions.push_back({need, false, request.counter_id, 1});
        if (request.signal_id != kNetNone)
            batch.completions.push_back({prefix_need, true, request.signal_id, request.signal_value});
    }
    // Signals come in need order already (a prefix maximum); counters may not.
    if (!std::is_sorted(batch.completions.begin(), batch.completions.end(),
                        [](const Completion& a, const Completion& b) { return a.need < b.need; }))
        std::stable_sort(batch.completions.begin(), batch.completions.end(),
                         [](const Completion& a, const Completion& b) { return a.need < b.need; });
    lane.waiting_bytes -= taken_bytes;
    lane.waiting.erase(lane.waiting.begin(), lane.waiting.begin() + std::ptrdiff_t(count));

    if (adversarial(kNetworkContextsOutOfOrder) && config_.max_context_stall_ns > 0) {
        std::uniform_int_distribution<int64_t> stall(0, config_.max_context_stall_ns);
        context.stalled_until = now_ns + stall(random_);
    }
}

void Scheduler::queue_word(Executor::Word::Kind kind, int32_t rank, int32_t context, uint32_t id,
                           uint64_t value) {
    uint32_t* slot = nullptr;
    switch (kind) {
        case Executor::Word::kSignal:
            slot = &signal_word_[size_t(rank / config_.ranks_per_node) * kNetNumSignals + id];
            break;
        case Executor::Word::kCounter:
            slot = &counter_word_[id];
            break;
        case Executor::Word::kFlushDone:
            slot = &flush_word_[size_t(context)];
            break;
    }
    if (*slot != 0) {
        call_words_[*slot - 1].value = value;  // a later value of the same word: one write
        return;
    }
    call_words_.push_back({kind, rank, context, id, value});
    *slot = uint32_t(call_words_.size());
}

bool Scheduler::issue_batch(Lane& lane, int32_t dst_rank, int64_t now_ns, int64_t& next_due) {
    Batch& batch = lane.batch;
    // The chunks the wire has carried by now (within the horizon) join this call's copies.
    while (batch.next_chunk < batch.chunks.size()) {
        const Executor::Copy& chunk = batch.chunks[batch.next_chunk];
        if (!config_.withhold && !wire_allows(batch, chunk.bytes, now_ns, next_due)) break;
        if (config_.withhold) {
            stats_.bytes_withheld += chunk.bytes;
        } else {
            call_copies_.push_back(chunk);
            stats_.bytes_delivered[dst_rank] += chunk.bytes;
            if (config_.bytes_per_ns > 0) {
                const double end = batch.next_chunk_wire_end;
                call_late_ns_ = std::max(call_late_ns_, double(now_ns) - end);
                if (call_first_end_ < 0) call_first_end_ = end;
                issued_due_ns_ = std::max(issued_due_ns_, end);
            }
            stats_.queued_ns += double(std::max<int64_t>(0, now_ns - batch.ready_ns));
        }
        ++batch.next_chunk;
        batch.next_chunk_wire_end = -1;
    }
    // Counters and signals whose chunks are now in the executor's queue (this call's copies go
    // before its words), due no sooner than their requests' latency ends.
    while (batch.next_completion < batch.completions.size() &&
           batch.completions[batch.next_completion].need <= batch.next_chunk) {
        const Completion& done = batch.completions[batch.next_completion++];
        issued_due_ns_ = std::max(issued_due_ns_, double(batch.ready_ns));
        if (!done.signal) {
            counter_values_[done.id] += done.add;
            queue_word(Executor::Word::kCounter, config_.rank, lane.context, done.id,
                       counter_values_[done.id]);
        } else if (!config_.withhold) {
            uint64_t& value = signal_values_[size_t(lane.peer_node) * kNetNumSignals + done.id];
            value += done.add;
            queue_word(Executor::Word::kSignal, dst_rank, lane.context, done.id, value);
            ++stats_.signals[dst_rank];
            ++stats_.signal_adds;
        }
    }
    if (batch.next_chunk < batch.chunks.size()) return false;
    batch.reset();
    return true;
}

void Scheduler::coalesce_call_copies() {
    // The copies of one call may run in any order (Executor): sorted by destination and source, the
    // ones contiguous at both ends go as one (a channel's records whose batches the wire carried
    // within one call, split only by the batch boundaries).
    std::sort(call_copies_.begin(), call_copies_.end(), [](const Executor::Copy& a, const Executor::Copy& b) {
        return a.dst_rank != b.dst_rank ? a.dst_rank < b.dst_rank : a.src_offset < b.src_offset;
    });
    size_t kept = 0;
    for (size_t i = 1; i < call_copies_.size(); ++i) {
        Executor::Copy& last = call_copies_[kept];
        const Executor::Copy& next = call_copies_[i];
        if (next.dst_rank == last.dst_rank && next.src_offset == last.src_offset + last.bytes &&
            next.dst_offset == last.dst_offset + last.bytes)
            last.bytes += next.bytes;
        else
            call_copies_[++kept] = next;
    }
    call_copies_.resize(kept + 1);
}

void Scheduler::flush_calls() {
    int64_t words_due = 0;
    if (!call_copies_.empty()) {
        // Shuffled puts (the reorder adversary) stay as they are.
        if (!adversarial(kNetworkReorderPuts)) coalesce_call_copies();
        executor_.copy(call_copies_.data(), call_copies_.size());
        stats_.copies += call_copies_.size();
        ++stats_.copy_calls;
        if (call_late_ns_ > 0) {
            stats_.late_ns += call_late_ns_;
            stats_.late_max_ns = std::max(stats_.late_max_ns, call_late_ns_);
        }
        call_copies_.clear();
    }
    call_late_ns_ = 0;
    if (!call_words_.empty()) {
        executor_.write(call_words_.data(), call_words_.size());
        ++stats_.write_calls;
        stats_.words += call_words_.size();
        for (const Executor::Word& word : call_words_) {
            switch (word.kind) {
                case Executor::Word::kSignal:
                    signal_word_[size_t(word.rank / config_.ranks_per_node) * kNetNumSignals + word.id] = 0;
                    break;
                case Executor::Word::kCounter:
                    counter_word_[word.id] = 0;
                    break;
                case Executor::Word::kFlushDone:
                    flush_word_[size_t(word.context)] = 0;
                    break;
            }
        }
        call_words_.clear();
        words_due = issued_due_ns_ > 0 ? int64_t(std::ceil(issued_due_ns_)) : 0;
    }
    call_first_end_ = -1;
    executor_.submit(words_due);
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
        queue_word(Executor::Word::kFlushDone, config_.rank, context_index, 0, reported);
    }
}

int64_t Scheduler::issue(int64_t now_ns) {
    int64_t next_due = kNever;
    const int32_t num_contexts = config_.num_contexts, num_nodes = config_.num_nodes;
    const bool reverse = adversarial(kNetworkContextsOutOfOrder);
    // Round robin over contexts and lanes, starting elsewhere on every call, one batch (or what
    // the wire has carried of it) per lane and sweep: no lane starves another when the wire is the
    // limit. Everything this call issues goes in one copy call, then one write call.
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
                if (!lane.batch.active && !lane.waiting.empty()) {
                    // A batch formed while the wire is busy could go no sooner, only smaller.
                    if (wire_busy_until(now_ns) > now_ns) {
                        next_due = std::min(next_due, wire_busy_until(now_ns));
                        continue;
                    }
                    form_batch(context, lane, now_ns, next_due);
                }
                if (!lane.batch.active) continue;
                const size_t before = lane.batch.next_chunk;
                const int32_t dst_rank =
                    lane.peer_node * config_.ranks_per_node + (config_.rank % config_.ranks_per_node);
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
    flush_calls();
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
            lane.waiting_bytes = 0;
            lane.batch.reset();
            lane.last_seen_ns = INT64_MIN / 2;
            lane.last_ready_ns = INT64_MIN / 2;
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
    call_copies_.clear();
    call_words_.clear();
    std::fill(signal_word_.begin(), signal_word_.end(), 0);
    std::fill(counter_word_.begin(), counter_word_.end(), 0);
    std::fill(flush_word_.begin(), flush_word_.end(), 0);
    wire_free_ns_ = -1;
    call_first_end_ = issued_due_ns_ = -1;
}

}  // namespace switchyard::net
