"""An MoE layer over N rank processes with Switchyard, checked against the same layer computed
densely on one rank, with the time per step.

Each rank holds its tokens and L = E / N experts (two-layer MLPs). A step: router -> top-k ->
dispatch (expert-major contiguous layout) -> per-expert GEMMs in torch -> weighted combine. The
dense check runs every token through its top-k experts on one rank with the same weights.

    python examples/python/moe_layer.py --ranks 2            # N processes on GPU 0
    python examples/python/moe_layer.py --ranks 4 --steps 50

Without a GPU it says so and exits 0.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time


def make_weights(args, torch):
    g = torch.Generator().manual_seed(1234)
    router = torch.randn(args.hidden, args.experts, generator=g) / args.hidden ** 0.5
    w1 = torch.randn(args.experts, args.hidden, args.ffn, generator=g) / args.hidden ** 0.5
    w2 = torch.randn(args.experts, args.ffn, args.hidden, generator=g) / args.ffn ** 0.5
    return router, w1.to(torch.bfloat16), w2.to(torch.bfloat16)


def make_tokens(args, rank, torch):
    g = torch.Generator().manual_seed(100 + rank)
    return torch.randn(args.tokens, args.hidden, generator=g).to(torch.bfloat16)


def route(x, router, topk, torch):
    scores = torch.softmax(x.float() @ router, dim=-1)
    weights, idx = scores.topk(topk, dim=-1)
    return idx, (weights / weights.sum(-1, keepdim=True)).float()


def dense_layer(x, idx, weights, w1, w2, torch):
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for k in range(idx.shape[1]):
        for e in idx[:, k].unique().tolist():
            rows = (idx[:, k] == e).nonzero().squeeze(1)
            h = torch.relu(x[rows] @ w1[e]) @ w2[e]
            out[rows] += weights[rows, k, None] * h.float()
    return out.to(torch.bfloat16)


def moe_layer(buffer, x, idx, weights, w1_local, w2_local, num_experts, torch, switchyard):
    result = buffer.dispatch(x, idx, num_experts, topk_weights=weights,
                             layout=switchyard.RecvLayout.EXPERT_CONTIGUOUS)
    counts = result.host_num_recv_tokens_per_expert
    recv = result.recv_x
    y = torch.empty_like(recv)
    start = 0
    for e, count in enumerate(counts):
        rows = recv[start:start + count]
        y[start:start + count] = torch.relu(rows @ w1_local[e]) @ w2_local[e]
        start += count
    # Weighted combine: out[t] = sum_k w[t][k] * y(t, k), in fp32, rounded once.
    return buffer.combine(result.handle, y, weighted=True).out


def run(rank, args, init_file):
    import torch
    import torch.distributed as dist

    import switchyard

    torch.cuda.set_device(0)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=args.ranks)
    router, w1, w2 = make_weights(args, torch)
    L = args.experts // args.ranks
    w1_local = w1[rank * L:(rank + 1) * L].cuda()
    w2_local = w2[rank * L:(rank + 1) * L].cuda()
    x = make_tokens(args, rank, torch).cuda()
    idx, weights = route(x, router.cuda(), args.topk, torch)

    buffer = switchyard.Buffer(dist.group.WORLD, max_tokens_per_rank=args.tokens, max_hidden=args.hidden,
                               max_topk=args.topk, max_experts=args.experts)
    out = moe_layer(buffer, x, idx, weights, w1_local, w2_local, args.experts, torch, switchyard)
    torch.cuda.synchronize()
    dense = dense_layer(x, idx, weights, w1.cuda(), w2.cuda(), torch)
    error = (out.float() - dense.float()).abs().max().item()
    scale = dense.float().abs().max().item()
    # Same math, different order of the bf16 GEMM accumulation: a few bf16 ulps of the output.
    ok = error <= 2e-2 * max(scale, 1.0)

    dist.barrier()
    for _ in range(3):
        moe_layer(buffer, x, idx, weights, w1_local, w2_local, args.experts, torch, switchyard)
    torch.cuda.synchronize()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(args.steps):
        moe_layer(buffer, x, idx, weights, w1_local, w2_local, args.experts, torch, switchyard)
    torch.cuda.synchronize()
    per_step = (time.perf_counter() - start) / args.steps
    print(f"rank {rank}: max |moe - dense| = {error:.3e} (output max {scale:.2f}) -> "
          f"{'matches' if ok else 'DIFFERS'}; {per_step * 1e3:.3f} ms per step "
          f"({args.tokens} tokens, hidden {args.hidden}, top-{args.topk} of {args.experts} experts, "
          f"{args.ranks} ranks on one GPU)", flush=True)
    buffer.destroy()
    dist.destroy_process_group()
    if not ok:
        raise SystemExit(1)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--ffn", type=int, default=512)
    parser.add_argument("--experts", type=int, default=16)
    parser.add_argument("--topk", type=int, default=4)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("moe_layer.py: needs torch; skipped")
        return 0
    if not torch.cuda.is_available():
        print("moe_layer.py: no CUDA GPU on this machine; skipped (runs N processes on one GPU)")
        return 0
    # Ranks share GPU 0: each process needs its own hardware queues (DESIGN.md §4 rule 1).
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(run, args=(args, os.path.join(tmp, "rendezvous")), nprocs=args.ranks, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
