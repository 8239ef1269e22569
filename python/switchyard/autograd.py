"""torch autograd functions over the high-throughput ops (DESIGN.md §2, "Backward").

The backward of dispatch is a combine of the gradients with the same handle; the backward of
combine is a cached dispatch of the gradient. Both run on the same Buffer as the forward, so every
rank must run its backward ops in the same order (as with any collective).

    recv_x, recv_weights, recv_idx, counts, handle = switchyard.autograd.dispatch(
        buffer, x, topk_idx, topk_weights, num_experts=E)
    y = experts(recv_x, recv_weights)          # any differentiable torch code
    out = switchyard.autograd.combine(buffer, y, handle)

Limits (checked, with a clear error): bf16 payloads (no FP8 quantization in the autograd path),
host-synced counts, unweighted combine (apply the weights in torch, where they are
differentiable). Rank-major outputs are views into the buffer that the next dispatch
overwrites, so they are cloned by default (``clone=False`` when nothing keeps them that long).
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from . import _switchyard as _C

__all__ = ["dispatch", "combine", "DispatchFunction", "CombineFunction"]


def _zero_invalid_masked_rows(recv_x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    # Masked layout [L, R*T_max, H]: rows past each expert's count are not written by a cached
    # dispatch; their gradient is zero (they never reach an output).
    rows = torch.arange(recv_x.shape[1], device=recv_x.device)
    valid = rows.unsqueeze(0) < counts.to(rows.dtype).unsqueeze(1)
    return recv_x * valid.unsqueeze(-1).to(recv_x.dtype)


class DispatchFunction(torch.autograd.Function):
    """forward: Buffer.dispatch; backward: Buffer.combine of the gradients with the same handle."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, topk_weights: Optional[torch.Tensor], buffer: _C.Buffer,
                topk_idx: torch.Tensor, num_experts: int, layout: Any, expert_alignment: int,
                num_sms: int, clone: bool):
        if x.dtype != torch.bfloat16:
            raise _C.InvalidArgument(
                f"switchyard.autograd.dispatch: x must be bf16 (got {x.dtype}); FP8 payloads are not differentiable")
        layout = _C.RecvLayout.RANK_MAJOR if layout is None else layout
        if isinstance(layout, str):
            layout = {"rank_major": _C.RecvLayout.RANK_MAJOR, "expert_contiguous": _C.RecvLayout.EXPERT_CONTIGUOUS,
                      "expert_masked": _C.RecvLayout.EXPERT_MASKED}[layout]
        result = buffer.dispatch(
            x.detach(), topk_idx, num_experts,
            topk_weights=None if topk_weights is None else topk_weights.detach(),
            layout=layout, expert_alignment=expert_alignment,
            # The backward's padding rows must be zero: the cached dispatch writes them only then.
            zero_padding=layout == _C.RecvLayout.EXPERT_CONTIGUOUS,
            num_sms=num_sms)
        recv_x, recv_weights, recv_idx = result.recv_x, result.recv_topk_weights, result.recv_topk_idx
        if layout == _C.RecvLayout.RANK_MAJOR and clone:
            recv_x = recv_x.clone()
            recv_weights = None if recv_weights is None else recv_weights.clone()
            recv_idx = None if recv_idx is None else recv_idx.clone()
        ctx.buffer = buffer
        ctx.handle = result.handle
        ctx.has_weights = topk_weights is not None
        ctx.layout = layout
        ctx.num_sms = num_sms
        counts = result.host_num_recv_tokens_per_expert
        non_differentiable = [t for t in (recv_idx,) if t is not None]
        if non_differentiable:
            ctx.mark_non_differentiable(*non_differentiable)
        return recv_x, recv_weights, recv_idx, counts, result.handle

    @staticmethod
    def backward(ctx: Any, grad_recv_x: Optional[torch.Tensor], grad_recv_weights: Optional[torch.Tensor],
                 *unused: Any):
        if grad_recv_x is None:
            return (None,) * 9
        row_weights = None
        if ctx.has_weights and grad_recv_weights is not None:
            row_weights = grad_recv_weights.float().contiguous()
        result = ctx.buffer.combine(ctx.handle, grad_recv_x.contiguous(), row_weights=row_weights,
                                    num_sms=ctx.num_sms)
        grad_weights = result.combined_topk_weights if row_weights is not None else None
        return result.out, grad_weights, None, None, None, None, None, None, None


class CombineFunction(torch.autograd.Function):
    """forward: Buffer.combine (unweighted); backward: Buffer.cached_dispatch of the gradient."""

    @staticmethod
    def forward(ctx: Any, y: torch.Tensor, bias0: Optional[torch.Tensor], bias1: Optional[torch.Tensor],
                buffer: _C.Buffer, handle: _C.DispatchHandle, num_sms: int, clone: bool,
                recv_counts: Optional[torch.Tensor]):
        if y.dtype != torch.bfloat16:
            raise _C.InvalidArgument(f"switchyard.autograd.combine: y must be bf16 (got {y.dtype})")
        result = buffer.combine(handle, y.detach(), bias0=None if bias0 is None else bias0.detach(),
                                bias1=None if bias1 is None else bias1.detach(), num_sms=num_sms)
        ctx.buffer = buffer
        ctx.handle = handle
        ctx.num_sms = num_sms
        ctx.clone = clone
        ctx.biases = (bias0 is not None, bias1 is not None)
        ctx.recv_counts = recv_counts
        return result.out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor):
        grad_out = grad_out.contiguous()
        result = ctx.buffer.cached_dispatch(ctx.handle, grad_out, num_sms=ctx.num_sms)
        grad_y = result.recv_x
        if ctx.handle.layout == _C.RecvLayout.RANK_MAJOR and ctx.clone:
            grad_y = grad_y.clone()
        elif ctx.handle.layout == _C.RecvLayout.EXPERT_MASKED:
            grad_y = _zero_invalid_masked_rows(grad_y, result.num_recv_tokens_per_expert)
        grad_bias0 = grad_out if ctx.biases[0] else None
        grad_bias1 = grad_out if ctx.biases[1] else None
        return grad_y, grad_bias0, grad_bias1, None, None, None, None, None


def dispatch(buffer: _C.Buffer, x: torch.Tensor, topk_idx: torch.Tensor,
             topk_weights: Optional[torch.Tensor] = None, *, num_experts: int,
             layout: Any = _C.RecvLayout.RANK_MAJOR, expert_alignment: int = 1, num_sms: int = 0,
             clone: bool = True):
    """Differentiable dispatch: ``(recv_x, recv_topk_weights, recv_topk_idx,
    num_recv_tokens_per_expert (list), handle)``. Gradients flow to ``x`` and ``topk_weights``."""
    return DispatchFunction.apply(x, topk_weights, buffer, topk_idx, num_experts, layout,
                                  expert_alignment, num_sms, clone)


def combine(buffer: _C.Buffer, y: torch.Tensor, handle: _C.DispatchHandle, *,
            bias: Any = None, num_sms: int = 0, clone: bool = True) -> torch.Tensor:
    """Differentiable (unweighted) combine of ``y`` laid out as ``handle``'s dispatch produced it;
    ``bias``: None, a tensor, or a pair of tensors [T, H] bf16 added once on the home rank."""
    bias0, bias1 = (bias if isinstance(bias, (tuple, list)) else (bias, None))
    return CombineFunction.apply(y, bias0, bias1, buffer, handle, num_sms, clone, None)
