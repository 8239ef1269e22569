"""Host CPU time of the Python binding per LL op (dispatch, combine), kernels cached.

Acceptance (DESIGN.md §9): the Python call's CPU time per op <= the C++ call's + 5 us. Run on a
GPU machine (one rank, EP1, so nothing waits for a peer) and compare with switchyard-bench's
host time per call for the same shape:

    python tests/python/bench_overhead.py [--tokens 128 --hidden 7168 --experts 256 --topk 8]

It prints, for each op, the CPU time of the call alone and of the call plus reading the outputs a
decode step uses (converted to torch tensors), averaged over many calls with the GPU kept ahead
(the caller's stream is synchronized only every few calls).
"""

from __future__ import annotations

import argparse
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=7168)
    parser.add_argument("--experts", type=int, default=256)
    parser.add_argument("--topk", type=int, default=8)
    parser.add_argument("--iters", type=int, default=2000)
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("bench_overhead.py: needs torch; skipped")
        return 0
    if not torch.cuda.is_available():
        print("bench_overhead.py: no CUDA GPU; skipped")
        return 0
    import switchyard

    torch.cuda.set_device(0)
    comm = switchyard.make_in_process_communicators(1)[0]
    buffer = switchyard.Buffer(comm, enable_high_throughput=False, enable_low_latency=True,
                               ll_max_tokens_per_rank=args.tokens, max_hidden=args.hidden, max_topk=args.topk,
                               max_experts=args.experts)
    x = torch.randn(args.tokens, args.hidden, device="cuda").to(torch.bfloat16)
    idx = torch.stack([torch.randperm(args.experts, device="cuda")[:args.topk] for _ in range(args.tokens)])
    weights = torch.rand(args.tokens, args.topk, device="cuda")
    buffer.ll_load_kernels(x, idx, args.experts)
    first = buffer.ll_dispatch(x, idx, args.experts)
    y = torch.zeros(first.recv_x.shape, dtype=torch.bfloat16, device="cuda")
    for _ in range(20):
        r = buffer.ll_dispatch(x, idx, args.experts)
        buffer.ll_combine(r.handle, y, idx, weights)
    torch.cuda.synchronize()

    def measure(body) -> float:
        total = 0.0
        for i in range(args.iters):
            begin = time.thread_time_ns()
            body()
            total += time.thread_time_ns() - begin
            if i % 16 == 15:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
        return total / args.iters / 1e3

    handle = first.handle
    d_call = measure(lambda: buffer.ll_dispatch(x, idx, args.experts))

    def dispatch_and_outputs():
        r = buffer.ll_dispatch(x, idx, args.experts)
        return r.recv_x, r.recv_scales, r.recv_count, r.handle

    d_full = measure(dispatch_and_outputs)
    c_call = measure(lambda: buffer.ll_combine(handle, y, idx, weights))
    c_full = measure(lambda: buffer.ll_combine(handle, y, idx, weights).out)
    print(f"python LL dispatch: {d_call:.2f} us CPU per call, {d_full:.2f} us with recv_x/recv_scales/recv_count "
          f"as torch tensors")
    print(f"python LL combine:  {c_call:.2f} us CPU per call, {c_full:.2f} us with out as a torch tensor")
    print(f"({args.tokens} tokens, hidden {args.hidden}, top-{args.topk} of {args.experts}, EP1; compare with "
          f"switchyard-bench ll's host time per call: Python <= C++ + 5 us)")
    buffer.destroy()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
