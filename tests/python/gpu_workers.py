"""Scenarios of the Python GPU tests, each run by every rank process (test_gpu.py spawns them).

Every rank builds the whole problem from one seed, so it can run the CPU reference for all ranks
and compare its own outputs bit for bit. Ranks share one GPU (DESIGN.md §4: LL kernels are loaded
before the first LL op; results are copied out after a synchronize, between host barriers).
"""

from __future__ import annotations

import os

import numpy as np
import torch
import torch.distributed as dist

import switchyard
from switchyard import reference as ref


def bits(tensor: torch.Tensor) -> np.ndarray:
    """Raw bits of a tensor (bf16 -> uint16, fp8 -> uint8, others as they are), flat, on the host."""
    tensor = tensor.detach()
    if tensor.dtype == torch.bfloat16:
        return tensor.contiguous().view(torch.int16).cpu().numpy().view(np.uint16).reshape(-1)
    if tensor.dtype == torch.float8_e4m3fn:
        return tensor.contiguous().view(torch.uint8).cpu().numpy().reshape(-1)
    return tensor.contiguous().cpu().numpy().reshape(-1)


class Problem:
    """Inputs of every rank (host tensors) and the matching reference inputs."""

    def __init__(self, num_ranks, tokens, hidden, topk, experts, seed, weights=True, max_tokens=None):
        self.R, self.H, self.K, self.E = num_ranks, hidden, topk, experts
        self.L = experts // num_ranks
        self.T_max = max_tokens or tokens
        self.x, self.idx, self.w = [], [], []
        for s in range(num_ranks):
            g = torch.Generator().manual_seed(seed * 1000 + s)
            T = tokens - (s % 2)  # ranks with different token counts
            self.x.append(torch.randn(T, hidden, generator=g).to(torch.bfloat16))
            idx = torch.rand(T, experts, generator=g).topk(topk, dim=1).indices
            if T > 1:
                idx[1, -1] = -1  # an empty slot
            self.idx.append(idx.to(torch.int64))
            self.w.append(torch.rand(T, topk, generator=g, dtype=torch.float32) if weights else None)
        self.problem = ref.Problem(num_ranks=num_ranks, num_experts=experts, hidden=hidden, topk=topk,
                                   max_tokens_per_rank=self.T_max)

    def ref_inputs(self, with_weights=True):
        out = []
        for s in range(self.R):
            fields = dict(num_tokens=self.x[s].shape[0], x_bf16=bits(self.x[s]), topk_idx=self.idx[s].numpy())
            if with_weights and self.w[s] is not None:
                fields["topk_weights"] = self.w[s].numpy()
            out.append(ref.DispatchInput(**fields))
        return out


def expect_equal(got, expected, what):
    got, expected = np.asarray(got), np.asarray(expected)
    if got.shape != expected.shape or not np.array_equal(got, expected):
        mismatch = "shape" if got.shape != expected.shape else int((got != expected).sum())
        raise AssertionError(f"rank {dist.get_rank()}: {what} differs from the reference ({mismatch} mismatches)")


def settle(buffer):
    """Drain this rank's GPU work and meet the other ranks before copying results out."""
    torch.cuda.synchronize()
    buffer.synchronize()
    dist.barrier()


# --- Scenarios ----------------------------------------------------------------------------------
def scenario_ht(rank, R):
    p = Problem(R, tokens=24, hidden=512, topk=4, experts=8 * R, seed=11)
    x, idx, w = p.x[rank].cuda(), p.idx[rank].cuda(), p.w[rank].cuda()
    expected = ref.dispatch(p.problem, p.ref_inputs())
    mine = expected.outputs[rank]
    with switchyard.Buffer(dist.group.WORLD, max_tokens_per_rank=p.T_max, max_hidden=p.H, max_topk=p.K,
                           max_experts=p.E, timeout_seconds=60) as buffer:
        # Rank-major bf16 dispatch: torch in, torch out.
        result = buffer.dispatch(x, idx, p.E, topk_weights=w)
        assert isinstance(result.recv_x, torch.Tensor) and result.recv_x.is_cuda
        settle(buffer)
        expect_equal(bits(result.recv_x), mine.x_bf16, "rank-major recv_x")
        expect_equal(bits(result.recv_topk_idx), mine.topk_idx, "recv_topk_idx")
        expect_equal(bits(result.recv_topk_weights), mine.topk_weights, "recv_topk_weights")
        expect_equal(result.host_num_recv_tokens_per_expert, mine.num_tokens_per_expert, "host counts")
        # Combine the received rows back, with the weights sent back and a bias.
        y = result.recv_x.clone()
        bias = torch.full((x.shape[0], p.H), 0.5, dtype=torch.bfloat16, device="cuda")
        combined = buffer.combine(result.handle, y, row_weights=result.recv_topk_weights.clone(), bias0=bias)
        settle(buffer)
        ref_combined = ref.combine(
            expected.routing,
            [ref.CombineInput(y=o.x_bf16, row_weights=o.topk_weights) for o in expected.outputs],
            [ref.CombineHomeInput(bias0=bits(torch.full((p.x[s].shape[0], p.H), 0.5, dtype=torch.bfloat16)))
             for s in range(R)])
        expect_equal(bits(combined.out), ref_combined[rank].out, "rank-major combine")
        expect_equal(bits(combined.combined_topk_weights), ref_combined[rank].combined_topk_weights,
                     "combined_topk_weights")
        # Cached dispatch of new data: byte-identical layout.
        x2 = (x.float() * 2 + 1).to(torch.bfloat16)
        cached = buffer.cached_dispatch(result.handle, x2)
        settle(buffer)
        inputs2 = p.ref_inputs(with_weights=False)
        for s in range(R):
            inputs2[s].x_bf16 = bits((p.x[s].float() * 2 + 1).to(torch.bfloat16))
        expect_equal(bits(cached.recv_x), ref.cached_dispatch(expected.routing, inputs2)[rank].x_bf16,
                     "cached dispatch")
        # Expert-major layouts with FP8 quantization inside the dispatch, both count modes.
        for fmt, rfmt in ((switchyard.ScaleFormat.FLOAT32, ref.ScaleFormat.FLOAT32),
                          (switchyard.ScaleFormat.UE8M0, ref.ScaleFormat.UE8M0)):
            for counts in (switchyard.CountMode.HOST_SYNCED, switchyard.CountMode.DEVICE):
                res = buffer.dispatch(x, idx, p.E, topk_weights=w, layout="expert_contiguous",
                                      expert_alignment=16, zero_padding=True, quantize_fp8=True,
                                      quantize_format=fmt, counts=counts)
                settle(buffer)
                exp = ref.dispatch(p.problem, p.ref_inputs(), ref.DispatchOptions(
                    layout=ref.RecvLayout.EXPERT_CONTIGUOUS, expert_alignment=16, zero_padding=True, quantize=True,
                    quantize_format=rfmt)).outputs[rank]
                rows = int(exp.expert_offsets[-1])
                words = ref.num_scale_words(p.H, rfmt)
                expect_equal(bits(res.recv_x[:rows]), exp.x_fp8[:rows * p.H], f"contiguous fp8 {fmt} {counts}")
                expect_equal(bits(res.recv_scales[:rows]).view(np.uint32), exp.scales[:rows * words],
                             f"scales {fmt} {counts}")
                expect_equal(bits(res.recv_topk_weights[:rows]), exp.topk_weights[:rows], "per-row weights")
        # Masked layout, weighted expert-major combine with the home rank's weights.
        res = buffer.dispatch(x, idx, p.E, topk_weights=w, layout=switchyard.RecvLayout.EXPERT_MASKED)
        ymask = torch.randn(res.recv_x.shape, generator=torch.Generator().manual_seed(rank)).to(torch.bfloat16)
        out = buffer.combine(res.handle, ymask.cuda(), weighted=True)
        settle(buffer)
        opts = ref.DispatchOptions(layout=ref.RecvLayout.EXPERT_MASKED)
        exp = ref.dispatch(p.problem, p.ref_inputs(), opts)
        count = exp.outputs[rank].num_tokens_per_expert
        rows_per_expert = res.recv_x.shape[1]
        for e in range(p.L):
            start = e * rows_per_expert * p.H
            expect_equal(bits(res.recv_x[e, :count[e]]), exp.outputs[rank].x_bf16[start:start + count[e] * p.H],
                         f"masked expert {e}")
        ys = [torch.randn((p.L, rows_per_expert, p.H), generator=torch.Generator().manual_seed(q)).to(torch.bfloat16)
              for q in range(R)]
        ref_out = ref.combine(exp.routing, [ref.CombineInput(y=bits(ys[q])) for q in range(R)],
                              options=ref.CombineOptions(weighted=True))
        expect_equal(bits(out.out), ref_out[rank].out, "weighted expert-major combine")
        # Op timelines: a traced dispatch and combine give their marks once, in microseconds.
        dist.barrier()
        buffer.set_op_tracing(True)
        traced = buffer.dispatch(x, idx, p.E, topk_weights=w)
        buffer.combine(traced.handle, traced.recv_x.clone())
        settle(buffer)
        for kind, mark in ((switchyard.OpTimelineKind.HT_DISPATCH, "sent"),
                           (switchyard.OpTimelineKind.HT_COMBINE, "senders done")):
            timeline = buffer.op_timeline(kind)
            assert not timeline.empty() and mark in timeline.marks, (kind, timeline.op, timeline.marks)
            assert 0.0 <= timeline.at(mark) < 1e6, (kind, timeline.at(mark))
            assert buffer.op_timeline(kind).empty()
        buffer.set_op_tracing(False)


def _ll_buffer(p, **extra):
    return switchyard.Buffer(dist.group.WORLD, enable_high_throughput=False, enable_low_latency=True,
                             ll_max_tokens_per_rank=p.T_max, max_hidden=p.H, max_topk=p.K, max_experts=p.E,
                             timeout_seconds=60, **extra)


def _check_ll_dispatch(p, rank, result, expected, use_fp8, what):
    out = expected.outputs[rank]
    counts = out.num_tokens_per_expert
    expect_equal(bits(result.recv_count), counts, f"{what}: recv_count")
    rows = result.recv_x.shape[1]
    words = result.recv_scales.shape[2] if use_fp8 else 0
    for e in range(p.L):
        n = int(counts[e])
        start = e * rows
        payload = out.x_fp8 if use_fp8 else out.x_bf16
        expect_equal(bits(result.recv_x[e, :n]), payload[start * p.H:(start + n) * p.H], f"{what}: expert {e} rows")
        if use_fp8:
            expect_equal(bits(result.recv_scales[e, :n]).view(np.uint32), out.scales[start * words:(start + n) * words],
                         f"{what}: expert {e} scales")


def scenario_ll(rank, R):
    p = Problem(R, tokens=16, hidden=1024, topk=4, experts=4 * R, seed=5, max_tokens=16)
    x, idx, w = p.x[rank].cuda(), p.idx[rank].cuda(), p.w[rank].cuda()
    with _ll_buffer(p) as buffer:
        for fmt, rfmt in ((switchyard.ScaleFormat.FLOAT32, ref.ScaleFormat.FLOAT32),
                          (switchyard.ScaleFormat.UE8M0, ref.ScaleFormat.UE8M0)):
            buffer.ll_load_kernels(x, idx, p.E, topk_weights=w, scale_format=fmt)
        buffer.ll_load_kernels(x, idx, p.E, topk_weights=w, use_fp8=False)
        dist.barrier()
        for use_fp8, fmt, rfmt in ((True, switchyard.ScaleFormat.FLOAT32, ref.ScaleFormat.FLOAT32),
                                   (True, switchyard.ScaleFormat.UE8M0, ref.ScaleFormat.UE8M0),
                                   (False, switchyard.ScaleFormat.FLOAT32, ref.ScaleFormat.NONE)):
            result = buffer.ll_dispatch(x, idx, p.E, topk_weights=w, use_fp8=use_fp8, scale_format=fmt)
            settle(buffer)
            expected = ref.dispatch(p.problem, p.ref_inputs(with_weights=False), ref.DispatchOptions(
                layout=ref.RecvLayout.EXPERT_MASKED, quantize=use_fp8, quantize_format=rfmt))
            _check_ll_dispatch(p, rank, result, expected, use_fp8, f"ll_dispatch fp8={use_fp8} {fmt}")
        # Combine: flat (home weights) and hierarchical (the dispatch's weights), and hook mode.
        ys = [torch.randn(tuple(result.recv_x.shape), generator=torch.Generator().manual_seed(50 + q))
              .to(torch.bfloat16) for q in range(R)]
        routing = expected.routing
        homes = [ref.CombineHomeInput(topk_weights=p.w[s].numpy()) for s in range(R)]
        flat = ref.combine(routing, [ref.CombineInput(y=bits(y)) for y in ys], homes, ref.CombineOptions(weighted=True))
        hier = ref.combine(routing, [ref.CombineInput(y=bits(y)) for y in ys], homes,
                           ref.CombineOptions(weighted=True, hierarchical=True))
        y = ys[rank].cuda()
        out = buffer.ll_combine(result.handle, y, idx, w).out
        settle(buffer)
        expect_equal(bits(out), flat[rank].out, "ll_combine flat")
        out = buffer.ll_combine(result.handle, y, idx, hierarchical=True).out
        settle(buffer)
        expect_equal(bits(out), hier[rank].out, "ll_combine hierarchical")
        # Hook mode: send half now, receive half on hook(); asynchronous events keep inputs alive.
        hooked = buffer.ll_dispatch(x, idx, p.E, topk_weights=w, use_fp8=False, return_recv_hook=True)
        received = hooked.hook()
        received.wait()
        settle(buffer)
        _check_ll_dispatch(p, rank, hooked, expected, False, "hook-mode dispatch")
        async_result = buffer.ll_combine(hooked.handle, y, idx, w, async_op=True)
        assert buffer.num_pending >= 1
        async_result.event.current_stream_wait()
        settle(buffer)
        expect_equal(bits(async_result.out), flat[rank].out, "async ll_combine")
        assert async_result.event.done()


def scenario_graph(rank, R):
    p = Problem(R, tokens=16, hidden=1024, topk=4, experts=4 * R, seed=9, max_tokens=16)
    x, idx, w = p.x[rank].cuda(), p.idx[rank].cuda(), p.w[rank].cuda()
    with _ll_buffer(p) as buffer:
        buffer.ll_load_kernels(x, idx, p.E, topk_weights=w, use_fp8=False)
        static_x, static_y = x.clone(), None
        dispatched = buffer.ll_dispatch(static_x, idx, p.E, use_fp8=False)  # warm-up outside the graph
        static_y = torch.zeros(dispatched.recv_x.shape, dtype=torch.bfloat16, device="cuda")
        settle(buffer)
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        dist.barrier()
        with torch.cuda.stream(stream):
            # Thread-local capture mode, as the C++ graph tests use: the library allocates the
            # outputs on a side stream outside the capture.
            with torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
                captured = buffer.ll_dispatch(static_x, idx, p.E, use_fp8=False)
                static_y.copy_(captured.recv_x)  # the "experts": identity
                combined = buffer.ll_combine(captured.handle, static_y, idx, w)
        torch.cuda.synchronize()
        dist.barrier()
        for step in range(3):
            scale = float(step + 2)
            static_x.copy_((x.float() * scale).to(torch.bfloat16))
            torch.cuda.synchronize()
            dist.barrier()
            graph.replay()
            settle(buffer)
            inputs = p.ref_inputs(with_weights=False)
            for s in range(R):
                inputs[s].x_bf16 = bits((p.x[s].float() * scale).to(torch.bfloat16))
            expected = ref.dispatch(p.problem, inputs, ref.DispatchOptions(layout=ref.RecvLayout.EXPERT_MASKED))
            _check_ll_dispatch(p, rank, captured, expected, False, f"graph replay {step}: dispatch")
            homes = [ref.CombineHomeInput(topk_weights=p.w[s].numpy()) for s in range(R)]
            exp_out = ref.combine(expected.routing, [ref.CombineInput(y=o.x_bf16) for o in expected.outputs],
                                  homes, ref.CombineOptions(weighted=True))
            expect_equal(bits(combined.out), exp_out[rank].out, f"graph replay {step}: combine")
        del graph
        torch.cuda.synchronize()
        dist.barrier()


def scenario_autograd(rank, R):
    from switchyard import autograd

    p = Problem(R, tokens=12, hidden=256, topk=2, experts=4 * R, seed=3)
    with switchyard.Buffer(dist.group.WORLD, max_tokens_per_rank=p.T_max, max_hidden=p.H, max_topk=p.K,
                           max_experts=p.E, timeout_seconds=60) as buffer:
        for layout in ("rank_major", "expert_contiguous"):
            x = p.x[rank].cuda().requires_grad_(True)
            w = p.w[rank].cuda().requires_grad_(True)
            recv_x, recv_w, recv_idx, counts, handle = autograd.dispatch(buffer, x, p.idx[rank].cuda(), w,
                                                                         num_experts=p.E, layout=layout)
            g = torch.randn(recv_x.shape, generator=torch.Generator().manual_seed(rank)).to(torch.bfloat16).cuda()
            gw = torch.rand(recv_w.shape, generator=torch.Generator().manual_seed(rank + 9)).cuda()
            if layout == "expert_contiguous":
                rows = sum(-(-c // 1) for c in counts)  # alignment 1: rows in use
                g[rows:] = 0
                gw[rows:] = 0
            ((recv_x.float() * g.float()).sum() + (recv_w * gw).sum()).backward()
            # The dual op on the same gradients.
            dual = buffer.combine(handle, g.contiguous(), row_weights=gw.contiguous())
            settle(buffer)
            expect_equal(bits(x.grad), bits(dual.out), f"{layout}: dispatch backward")
            expect_equal(bits(w.grad), bits(dual.combined_topk_weights), f"{layout}: weights backward")
        # Combine's backward is a cached dispatch of the gradient.
        recv_x, recv_w, _, _, handle = autograd.dispatch(buffer, p.x[rank].cuda(), p.idx[rank].cuda(), None,
                                                         num_experts=p.E)
        y = recv_x.detach().clone().requires_grad_(True)
        out = autograd.combine(buffer, y, handle)
        grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(7 + rank)).to(torch.bfloat16).cuda()
        out.backward(grad)
        dual = buffer.cached_dispatch(handle, grad)
        settle(buffer)
        expect_equal(bits(y.grad), bits(dual.recv_x), "combine backward")


def scenario_facade(rank, R):
    """Written against DeepEP's documented API (deep_ep.Buffer), with only the import changed."""
    from switchyard.compat import deep_ep

    p = Problem(R, tokens=20, hidden=512, topk=4, experts=8 * R, seed=21)
    x, topk_idx, topk_weights = p.x[rank].cuda(), p.idx[rank].cuda(), p.w[rank].cuda()
    num_experts = p.E
    buffer = deep_ep.Buffer(dist.group.WORLD, int(1e9), 0, max_tokens_per_rank=p.T_max)
    num_tokens_per_rank, num_tokens_per_rdma_rank, num_tokens_per_expert, is_token_in_rank, previous_event = \
        buffer.get_dispatch_layout(topk_idx, num_experts, async_finish=True)
    recv_x, recv_topk_idx, recv_topk_weights, num_recv_tokens_per_expert_list, handle, event = buffer.dispatch(
        x, topk_idx=topk_idx, topk_weights=topk_weights, num_tokens_per_rank=num_tokens_per_rank,
        num_tokens_per_rdma_rank=num_tokens_per_rdma_rank, is_token_in_rank=is_token_in_rank,
        num_tokens_per_expert=num_tokens_per_expert, previous_event=previous_event, async_finish=True,
        allocate_on_comm_stream=True, config=deep_ep.Buffer.get_dispatch_config(R))
    event.current_stream_wait()
    assert recv_topk_idx.dtype == torch.int64 and recv_topk_weights.dtype == torch.float32
    assert num_tokens_per_rdma_rank is None and isinstance(num_recv_tokens_per_expert_list, list)
    combined_x, combined_topk_weights, event = buffer.combine(recv_x, handle, topk_weights=recv_topk_weights,
                                                              async_finish=True, previous_event=event)
    event.current_stream_wait()
    torch.cuda.synchronize()
    dist.barrier()
    expected = ref.dispatch(p.problem, p.ref_inputs())
    mine = expected.outputs[rank]
    expect_equal(bits(recv_x), mine.x_bf16, "facade dispatch")
    expect_equal(bits(recv_topk_idx.to(torch.int32)), mine.topk_idx, "facade recv_topk_idx")
    expect_equal(num_recv_tokens_per_expert_list, mine.num_tokens_per_expert, "facade counts")
    expect_equal(bits(is_token_in_rank.sum(1) > 0), bits((p.idx[rank] >= 0).any(1)), "facade layout")
    back = ref.combine(expected.routing, [ref.CombineInput(y=o.x_bf16, row_weights=o.topk_weights)
                                          for o in expected.outputs])
    expect_equal(bits(combined_x), back[rank].out, "facade combine")
    expect_equal(bits(combined_topk_weights), back[rank].combined_topk_weights, "facade combined weights")
    buffer.destroy()

    # Low latency, as a decoding engine drives it.
    T_ll = 16
    q = Problem(R, tokens=T_ll, hidden=1024, topk=4, experts=4 * R, seed=23, max_tokens=T_ll)
    x, topk_idx, topk_weights = q.x[rank].cuda(), q.idx[rank].cuda(), q.w[rank].cuda()
    ll = deep_ep.Buffer(dist.group.WORLD, 0, deep_ep.Buffer.get_low_latency_rdma_size_hint(T_ll, q.H, R, q.E),
                        low_latency_mode=True, num_qps_per_rank=q.E // R)
    recv, recv_count, handle, event, hook = ll.low_latency_dispatch(x, topk_idx, T_ll, q.E, use_fp8=True,
                                                                    return_recv_hook=True)
    hook()
    packed_recv_x, packed_recv_x_scales = recv
    # The "experts": dequantize-free identity on bf16 copies of the fp8 rows.
    expert_out = packed_recv_x.to(torch.bfloat16)
    combined_x, event, hook = ll.low_latency_combine(expert_out, topk_idx, topk_weights, handle)
    torch.cuda.synchronize()
    dist.barrier()
    expected = ref.dispatch(q.problem, q.ref_inputs(with_weights=False),
                            ref.DispatchOptions(layout=ref.RecvLayout.EXPERT_MASKED, quantize=True,
                                                quantize_format=ref.ScaleFormat.FLOAT32))
    expect_equal(bits(recv_count), expected.outputs[rank].num_tokens_per_expert, "facade LL counts")
    ys = []
    for o in expected.outputs:
        ys.append(bits(torch.from_numpy(ref.e4m3_to_float(o.x_fp8)).to(torch.bfloat16)))
    homes = [ref.CombineHomeInput(topk_weights=q.w[s].numpy()) for s in range(R)]
    out = ref.combine(expected.routing, [ref.CombineInput(y=y) for y in ys], homes, ref.CombineOptions(weighted=True))
    expect_equal(bits(combined_x), out[rank].out, "facade LL combine")
    ll.destroy()


def scenario_size_hint(rank, R):
    config = switchyard.BufferConfig(max_tokens_per_rank=64, max_hidden=512, max_topk=4, max_experts=4 * R,
                                     enable_low_latency=True, ll_max_tokens_per_rank=32)
    hint = switchyard.buffer_size_hint(config, R)
    with switchyard.Buffer(dist.group.WORLD, config) as buffer:
        assert buffer.buffer_bytes == hint, f"buffer_bytes {buffer.buffer_bytes} != hint {hint}"
        assert buffer.topology.num_ranks == R and buffer.topology.ranks_on_my_gpu == R


SCENARIOS = {name[len("scenario_"):]: fn for name, fn in globals().items() if name.startswith("scenario_")}


def worker(rank, world_size, scenario, init_file):
    torch.cuda.set_device(0)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        SCENARIOS[scenario](rank, world_size)
        dist.barrier()
    finally:
        dist.destroy_process_group()
