"""A DeepEP-compatible facade over Switchyard: ``from switchyard.compat import deep_ep``.

``Buffer``, ``Config`` and ``EventOverlap`` keep DeepEP's method names, argument names and
order, tuple arities and dtypes (int64 indices, float32 weights) for the calls MoE engines make
(vLLM, SGLang, Megatron-LM), so an engine switches by changing an import. An argument Switchyard
does not support raises ``NotImplementedError`` naming it; tuning arguments that have no meaning
here (chunk sizes, queue pairs, byte budgets) are accepted and have no effect. docs/python.md has
the table of every call and what it maps to.

Differences a caller may notice:
- Buffers are sized by capacities, not bytes. A ``Buffer`` creates its Switchyard buffer at its
  first dispatch (collective, as DeepEP's constructor is), from that call's shapes: hidden,
  top-k, experts, and (high throughput) the largest token count over the ranks rounded up to a
  power of two; low latency: ``num_max_dispatch_tokens_per_rank``. Pass ``max_tokens_per_rank``,
  ``hidden``, ``num_topk``, ``num_experts`` (keyword-only, Switchyard's own) to fix them, e.g. when
  later calls may carry more tokens than the first.
- ``low_latency_mode=True`` buffers serve the low-latency calls, others the high-throughput ones.
- Rank-major dispatch outputs are copied out of the buffer (DeepEP returns owned tensors); pass
  ``clone_outputs=False`` to get the zero-copy views (valid until the next dispatch).
- ``get_dispatch_layout`` counts with torch ops on the current stream (Switchyard's dispatch
  computes its own layout, so the counts are informational).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Optional, Sequence, Tuple, Union

from .. import _switchyard as _C
from .._bootstrap import make_communicator

__all__ = ["Buffer", "Config", "EventOverlap", "ElasticBuffer"]


def _torch():
    import torch

    return torch


def _unsupported(name: str, value: Any, why: str = "") -> None:
    raise NotImplementedError(
        f"switchyard.compat.deep_ep: argument '{name}'={value!r} is not supported by Switchyard"
        + (f" ({why})" if why else ""))


def _reject_extra(method: str, kwargs: dict) -> None:
    if kwargs:
        names = ", ".join(f"'{k}'" for k in sorted(kwargs))
        raise NotImplementedError(f"switchyard.compat.deep_ep: {method}() does not support argument(s) {names}")


def _event_of(previous_event: Any) -> Any:
    if previous_event is None:
        return None
    if isinstance(previous_event, EventOverlap):
        return previous_event.event
    return previous_event


class EventOverlap:
    """An op's completion with the tensors it must keep alive (DeepEP's EventOverlap).

    ``current_stream_wait()`` makes torch's current stream wait for it; as a context manager,
    the current stream waits on exit.
    """

    def __init__(self, event: Optional[_C.Event] = None, extra_tensors: Optional[Tuple[Any, ...]] = None):
        self.event = event
        self.extra_tensors = extra_tensors

    def current_stream_wait(self) -> None:
        if self.event is not None:
            self.event.current_stream_wait()

    def __enter__(self) -> "EventOverlap":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.event is not None:
            self.event.current_stream_wait()


class Config:
    """DeepEP's performance config. Only ``num_sms`` means something to Switchyard (the SM budget
    of an op); the chunk sizes are accepted and have no effect."""

    def __init__(self, num_sms: int = 20, num_max_nvl_chunked_send_tokens: int = 6,
                 num_max_nvl_chunked_recv_tokens: int = 256, num_max_rdma_chunked_send_tokens: int = 6,
                 num_max_rdma_chunked_recv_tokens: int = 256):
        self.num_sms = num_sms
        self.num_max_nvl_chunked_send_tokens = num_max_nvl_chunked_send_tokens
        self.num_max_nvl_chunked_recv_tokens = num_max_nvl_chunked_recv_tokens
        self.num_max_rdma_chunked_send_tokens = num_max_rdma_chunked_send_tokens
        self.num_max_rdma_chunked_recv_tokens = num_max_rdma_chunked_recv_tokens

    def get_nvl_buffer_size_hint(self, hidden_bytes: int, num_ranks: int) -> int:
        """Bytes of a Switchyard high-throughput buffer for bf16 rows of ``hidden_bytes`` with the
        default capacities (BufferConfig()). Advisory: the facade ignores num_nvl_bytes."""
        config = _C.BufferConfig(max_hidden=max(1, hidden_bytes // 2))
        return _C.buffer_size_hint(config, num_ranks)

    def get_rdma_buffer_size_hint(self, hidden_bytes: int, num_ranks: int) -> int:
        """0: Switchyard's scale-out regions are part of the one buffer."""
        return 0


class Buffer:
    """DeepEP's ``deep_ep.Buffer`` over a Switchyard buffer (see the module docstring)."""

    num_sms: int = 20

    def __init__(self, group: Any, num_nvl_bytes: int = 0, num_rdma_bytes: int = 0,
                 low_latency_mode: bool = False, num_qps_per_rank: int = 24,
                 allow_nvlink_for_low_latency_mode: bool = True, allow_mnnvl: bool = False,
                 use_fabric: bool = False, explicitly_destroy: bool = False, enable_shrink: bool = False,
                 comm: Any = None, *, max_tokens_per_rank: Optional[int] = None, hidden: Optional[int] = None,
                 num_topk: Optional[int] = None, num_experts: Optional[int] = None,
                 timeout_seconds: Optional[float] = None, zero_copy_combine: bool = False,
                 clone_outputs: bool = True, device: Optional[int] = None):
        if comm is not None:
            _unsupported("comm", comm, "pass a torch.distributed group")
        if allow_mnnvl:
            _unsupported("allow_mnnvl", allow_mnnvl, "multi-node NVLink domains are not supported yet")
        if use_fabric:
            _unsupported("use_fabric", use_fabric)
        if not allow_nvlink_for_low_latency_mode:
            _unsupported("allow_nvlink_for_low_latency_mode", allow_nvlink_for_low_latency_mode,
                         "Switchyard always uses NVLink inside a node")
        torch = _torch()
        self.group = group
        self.num_nvl_bytes = num_nvl_bytes
        self.num_rdma_bytes = num_rdma_bytes
        self.low_latency_mode = low_latency_mode
        self.explicitly_destroy = explicitly_destroy
        self.enable_shrink = enable_shrink
        self.clone_outputs = clone_outputs
        self.device = torch.cuda.current_device() if device is None else device
        self._communicator, _ = make_communicator(group)
        self.rank = self._communicator.rank()
        self.group_size = self._communicator.size()
        self._capacity = dict(max_tokens_per_rank=max_tokens_per_rank, hidden=hidden, num_topk=num_topk,
                              num_experts=num_experts)
        self._timeout = timeout_seconds
        self._zero_copy_combine = zero_copy_combine
        self._buffer: Optional[_C.Buffer] = None
        self._loaded_ll_kernels: set = set()
        if all(v is not None for v in self._capacity.values()):
            self._create(max_tokens_per_rank, hidden, num_topk, num_experts)

    # --- The Switchyard buffer -----------------------------------------------------------------
    def _create(self, tokens: int, hidden: int, topk: int, experts: int) -> _C.Buffer:
        fields = dict(max_hidden=hidden, max_topk=topk, max_experts=experts)
        if self.low_latency_mode:
            fields.update(enable_high_throughput=False, enable_low_latency=True, ll_max_tokens_per_rank=tokens,
                          ll_mask_unresponsive_ranks=self.enable_shrink,
                          ll_zero_copy_combine=self._zero_copy_combine)
        else:
            fields.update(max_tokens_per_rank=tokens)
        if self._timeout is not None:
            fields["timeout_seconds"] = self._timeout
        buffer = _C.Buffer(self._communicator, self.device, _C.BufferConfig(**fields))
        buffer.framework = _C.Framework.TORCH
        self._buffer = buffer
        return buffer

    def _max_tokens_over_ranks(self, tokens: int) -> int:
        torch = _torch()
        import torch.distributed as dist

        on_gpu = str(dist.get_backend(self.group)) == "nccl"
        value = torch.tensor([tokens], dtype=torch.int64, device="cuda" if on_gpu else "cpu")
        dist.all_reduce(value, op=dist.ReduceOp.MAX, group=self.group)
        largest = int(value.item())
        return max(128, 1 << max(0, (largest - 1).bit_length()))

    def _ht_buffer(self, x: Any, topk_idx: Any, num_experts: Optional[int]) -> _C.Buffer:
        if self.low_latency_mode:
            raise RuntimeError("switchyard.compat.deep_ep: this Buffer was made with low_latency_mode=True; "
                               "make another (low_latency_mode=False) for dispatch/combine")
        if self._buffer is None:
            if topk_idx is None or num_experts is None:
                raise RuntimeError("switchyard.compat.deep_ep: the first dispatch needs topk_idx and num_tokens_per_expert")
            cap = self._capacity
            tokens = cap["max_tokens_per_rank"] or self._max_tokens_over_ranks(int(x.shape[0]))
            self._create(tokens, cap["hidden"] or int(x.shape[1]), cap["num_topk"] or int(topk_idx.shape[1]),
                         cap["num_experts"] or int(num_experts))
        return self._buffer

    def _ll_buffer(self, x: Any, topk_idx: Any, num_max_dispatch_tokens_per_rank: int, num_experts: int) -> _C.Buffer:
        if not self.low_latency_mode:
            raise RuntimeError("switchyard.compat.deep_ep: low-latency calls need a Buffer made with "
                               "low_latency_mode=True")
        if self._buffer is None:
            cap = self._capacity
            self._create(cap["max_tokens_per_rank"] or num_max_dispatch_tokens_per_rank,
                         cap["hidden"] or int(x.shape[1]), cap["num_topk"] or int(topk_idx.shape[1]),
                         cap["num_experts"] or num_experts)
        return self._buffer

    @property
    def runtime(self) -> Optional[_C.Buffer]:
        """The Switchyard buffer (None until the first dispatch)."""
        return self._buffer

    def destroy(self) -> None:
        """Collective: free the buffer (every rank calls it)."""
        if self._buffer is not None:
            self._buffer.destroy()
            self._buffer = None

    # --- Static helpers ------------------------------------------------------------------------
    @staticmethod
    def set_num_sms(new_num_sms: int) -> None:
        assert new_num_sms % 2 == 0, "the SM count must be even"
        Buffer.num_sms = new_num_sms

    @staticmethod
    def capture() -> EventOverlap:
        return EventOverlap(_C.Event.record(None, _C.Framework.TORCH))

    @staticmethod
    def get_dispatch_config(num_ranks: int) -> Config:
        return Config(Buffer.num_sms)

    @staticmethod
    def get_combine_config(num_ranks: int) -> Config:
        return Config(Buffer.num_sms)

    @staticmethod
    def get_low_latency_rdma_size_hint(num_max_dispatch_tokens_per_rank: int, hidden: int, num_ranks: int,
                                       num_experts: int) -> int:
        """Bytes of a Switchyard low-latency buffer for these capacities (top-8 assumed)."""
        config = _C.BufferConfig(enable_high_throughput=False, enable_low_latency=True,
                                 ll_max_tokens_per_rank=num_max_dispatch_tokens_per_rank, max_hidden=hidden,
                                 max_experts=num_experts, max_topk=8)
        return _C.buffer_size_hint(config, num_ranks)

    def get_comm_stream(self) -> Any:
        torch = _torch()
        if self._buffer is None:
            raise RuntimeError("switchyard.compat.deep_ep: no communication stream before the first dispatch")
        return torch.cuda.ExternalStream(self._buffer.comm_stream)

    # --- High throughput -----------------------------------------------------------------------
    def get_dispatch_layout(self, topk_idx: Any, num_experts: int, previous_event: Optional[EventOverlap] = None,
                            async_finish: bool = False, allocate_on_comm_stream: bool = False):
        """(num_tokens_per_rank, num_tokens_per_rdma_rank (None: one node), num_tokens_per_expert,
        is_token_in_rank, event)."""
        torch = _torch()
        event = _event_of(previous_event)
        if isinstance(event, _C.Event):
            event.wait(None)
        elif event is not None:
            torch.cuda.current_stream().wait_event(event)
        num_ranks = self.group_size
        experts_per_rank = num_experts // num_ranks
        valid = topk_idx >= 0
        rank_of = torch.where(valid, topk_idx // experts_per_rank, torch.full_like(topk_idx, num_ranks))
        in_rank = torch.zeros((topk_idx.shape[0], num_ranks + 1), dtype=torch.bool, device=topk_idx.device)
        in_rank.scatter_(1, rank_of.long(), True)
        is_token_in_rank = in_rank[:, :num_ranks].contiguous()
        num_tokens_per_rank = is_token_in_rank.sum(0, dtype=torch.int32)
        flat = topk_idx[valid].long()
        num_tokens_per_expert = torch.bincount(flat, minlength=num_experts).to(torch.int32)
        done = _C.Event.record(None, _C.Framework.TORCH) if async_finish else None
        return (num_tokens_per_rank, None, num_tokens_per_expert, is_token_in_rank,
                EventOverlap(done, (topk_idx,) if async_finish else None))

    def dispatch(self, x: Union[Any, Tuple[Any, Any]], handle: Optional[_C.DispatchHandle] = None,
                 num_tokens_per_rank: Any = None, num_tokens_per_rdma_rank: Any = None,
                 is_token_in_rank: Any = None, num_tokens_per_expert: Any = None, topk_idx: Any = None,
                 topk_weights: Any = None, expert_alignment: int = 1, num_worst_tokens: int = 0,
                 config: Optional[Config] = None, previous_event: Optional[EventOverlap] = None,
                 async_finish: bool = False, allocate_on_comm_stream: bool = False):
        """(recv_x, recv_topk_idx, recv_topk_weights, num_recv_tokens_per_expert_list, handle, event);
        recv_x is (recv_x, recv_scales) for an fp8 (x, scales) input. With ``handle``: a cached
        dispatch, returning (recv_x, None, None, None, None, event)."""
        torch = _torch()
        x_data, x_scales = (x if isinstance(x, tuple) else (x, None))
        num_experts = None if num_tokens_per_expert is None else int(num_tokens_per_expert.shape[0])
        num_sms = (config.num_sms if config is not None else 0)
        common = dict(x_scales=x_scales, num_sms=num_sms, after=_event_of(previous_event), async_op=async_finish)
        if handle is not None:
            buffer = self._ht_buffer(x_data, None, None)
            result = buffer.cached_dispatch(handle, x_data, topk_weights=topk_weights, **common)
        else:
            if topk_idx is None or num_experts is None:
                raise ValueError("switchyard.compat.deep_ep: dispatch without a handle needs topk_idx and "
                                 "num_tokens_per_expert (from get_dispatch_layout)")
            buffer = self._ht_buffer(x_data, topk_idx, num_experts)
            counts = _C.CountMode.DEVICE if num_worst_tokens > 0 else _C.CountMode.HOST_SYNCED
            result = buffer.dispatch(x_data, topk_idx, num_experts, topk_weights=topk_weights, counts=counts,
                                     **common)
        recv_x, recv_scales = result.recv_x, result.recv_scales
        if self.clone_outputs:
            recv_x = recv_x.clone()
            recv_scales = None if recv_scales is None else recv_scales.clone()
        event = EventOverlap(result.event if async_finish else None,
                             (x_data, x_scales, topk_idx, topk_weights) if async_finish else None)
        out_x = (recv_x, recv_scales) if x_scales is not None else recv_x
        if handle is not None:
            return out_x, None, None, None, None, event
        recv_topk_idx = None if result.recv_topk_idx is None else result.recv_topk_idx.to(torch.int64)
        recv_topk_weights = result.recv_topk_weights
        if recv_topk_weights is not None and self.clone_outputs:
            recv_topk_weights = recv_topk_weights.clone()
        if num_worst_tokens > 0:
            # Worst-case sizing without a host sync: rows past the received count carry -1 ids.
            rows = torch.arange(recv_topk_idx.shape[0], device=recv_topk_idx.device)
            padding = rows >= result.num_recv_rows.to(rows.dtype)
            recv_topk_idx = recv_topk_idx.masked_fill(padding.unsqueeze(1), -1)
            recv_x, recv_topk_idx, recv_topk_weights, recv_scales = (
                _rows(t, num_worst_tokens) for t in (recv_x, recv_topk_idx, recv_topk_weights, recv_scales))
            out_x = (recv_x, recv_scales) if x_scales is not None else recv_x
            counts_list = []
        else:
            counts_list = [(c + expert_alignment - 1) // expert_alignment * expert_alignment
                           for c in result.host_num_recv_tokens_per_expert]
        return out_x, recv_topk_idx, recv_topk_weights, counts_list, result.handle, event

    def combine(self, x: Any, handle: _C.DispatchHandle, topk_weights: Any = None,
                bias: Union[Any, Tuple[Any, Any], None] = None, config: Optional[Config] = None,
                previous_event: Optional[EventOverlap] = None, async_finish: bool = False,
                allocate_on_comm_stream: bool = False):
        """(combined_x, combined_topk_weights, event): the unweighted sum of each token's rows over
        the ranks that received it, plus the biases; topk_weights rows are sent back."""
        buffer = self._ht_buffer(x, None, None)
        bias0, bias1 = (bias if isinstance(bias, (tuple, list)) else (bias, None))
        result = buffer.combine(handle, x, row_weights=topk_weights, bias0=bias0, bias1=bias1,
                                num_sms=config.num_sms if config is not None else 0,
                                after=_event_of(previous_event), async_op=async_finish)
        event = EventOverlap(result.event if async_finish else None,
                             (x, topk_weights, bias0, bias1) if async_finish else None)
        return result.out, result.combined_topk_weights, event

    # --- Low latency ---------------------------------------------------------------------------
    def _load_ll_kernels(self, buffer: _C.Buffer, x: Any, topk_idx: Any, num_experts: int, use_fp8: bool,
                         scale_format: Any) -> None:
        # DESIGN.md §4 rule 7: load the kernels before any op that could wait for a co-located peer.
        key = (tuple(x.shape[1:]), int(topk_idx.shape[1]), num_experts, use_fp8, scale_format)
        if key not in self._loaded_ll_kernels:
            buffer.ll_load_kernels(x, topk_idx, num_experts, use_fp8=use_fp8, scale_format=scale_format)
            self._loaded_ll_kernels.add(key)

    def low_latency_dispatch(self, x: Any, topk_idx: Any, num_max_dispatch_tokens_per_rank: int, num_experts: int,
                             cumulative_local_expert_recv_stats: Any = None,
                             dispatch_wait_recv_cost_stats: Any = None, use_fp8: bool = True,
                             round_scale: bool = False, use_ue8m0: bool = False, async_finish: bool = False,
                             return_recv_hook: bool = False, **kwargs: Any):
        """(recv_x | (recv_x, recv_scales), recv_count, handle, event, hook); recv_x is masked
        [L, R*T, H] (fp8 e4m3 or bf16), scales column-major (fp32, or UE8M0 packed in int32)."""
        for name in ("use_nvfp4", "x_global_scale", "x_sf_scale"):
            if kwargs.get(name) not in (None, False):
                _unsupported(name, kwargs[name])
            kwargs.pop(name, None)
        _reject_extra("low_latency_dispatch", kwargs)
        if use_fp8 and round_scale and not use_ue8m0:
            _unsupported("round_scale", round_scale, "power-of-two scales come as UE8M0 (use_ue8m0=True)")
        if use_ue8m0 and not use_fp8:
            _unsupported("use_ue8m0", use_ue8m0, "UE8M0 scales need use_fp8=True")
        buffer = self._ll_buffer(x, topk_idx, num_max_dispatch_tokens_per_rank, num_experts)
        expected = buffer.config.ll_max_tokens_per_rank
        if num_max_dispatch_tokens_per_rank != expected:
            raise ValueError(f"switchyard.compat.deep_ep: num_max_dispatch_tokens_per_rank must stay "
                             f"{expected} (the buffer's), got {num_max_dispatch_tokens_per_rank}")
        scale_format = _C.ScaleFormat.UE8M0 if use_ue8m0 else _C.ScaleFormat.FLOAT32
        self._load_ll_kernels(buffer, x, topk_idx, num_experts, use_fp8, scale_format)
        result = buffer.ll_dispatch(x, topk_idx, num_experts, use_fp8=use_fp8, scale_format=scale_format,
                                    cumulative_local_expert_recv_stats=cumulative_local_expert_recv_stats,
                                    wait_time_stats=dispatch_wait_recv_cost_stats,
                                    return_recv_hook=return_recv_hook, async_op=async_finish)
        recv_x = (result.recv_x, result.recv_scales) if use_fp8 else result.recv_x
        event = EventOverlap(result.event if async_finish else None, (x, topk_idx) if async_finish else None)
        return recv_x, result.recv_count, result.handle, event, _hook(result)

    def low_latency_combine(self, x: Any, topk_idx: Any, topk_weights: Any, handle: _C.LowLatencyHandle,
                            use_logfmt: bool = False, zero_copy: bool = False, async_finish: bool = False,
                            return_recv_hook: bool = False, out: Any = None,
                            combine_wait_recv_cost_stats: Any = None, **kwargs: Any):
        """(combined_x, event, hook): out[t] = sum_k topk_weights[t][k] * x(t, k), k ascending."""
        if use_logfmt:
            _unsupported("use_logfmt", use_logfmt, "the combine sends bf16 rows")
        _reject_extra("low_latency_combine", kwargs)
        if self._buffer is None:
            raise RuntimeError("switchyard.compat.deep_ep: low_latency_combine before any low_latency_dispatch")
        result = self._buffer.ll_combine(handle, x, topk_idx, topk_weights, out=out, zero_copy=zero_copy,
                                         return_recv_hook=return_recv_hook,
                                         wait_time_stats=combine_wait_recv_cost_stats, async_op=async_finish)
        event = EventOverlap(result.event if async_finish else None,
                             (x, topk_idx, topk_weights) if async_finish else None)
        return result.out, event, _hook(result)

    def get_next_low_latency_combine_buffer(self, handle: _C.LowLatencyHandle) -> Any:
        """The buffer's bf16 [L, R*T, H] send area for a zero-copy combine (needs
        Buffer(..., zero_copy_combine=True))."""
        if self._buffer is None or not self._buffer.config.ll_zero_copy_combine:
            raise RuntimeError("switchyard.compat.deep_ep: zero-copy combine needs Buffer(..., "
                               "low_latency_mode=True, zero_copy_combine=True)")
        return self._buffer.ll_combine_input(handle)

    def clean_low_latency_buffer(self, num_max_dispatch_tokens_per_rank: int, hidden: int, num_experts: int) -> None:
        """Nothing to do: Switchyard's control words return to zero after every op."""

    def low_latency_update_mask_buffer(self, rank_to_mask: int, mask: bool = False) -> None:
        self._require_shrink().ll_set_mask(rank_to_mask, mask)

    def low_latency_query_mask_buffer(self, mask_status: Any) -> None:
        torch = _torch()
        masked = self._require_shrink().ll_query_mask()
        mask_status.copy_(torch.tensor(masked, dtype=mask_status.dtype))

    def low_latency_clean_mask_buffer(self) -> None:
        self._require_shrink().ll_clear_mask()

    def _require_shrink(self) -> _C.Buffer:
        if not self.enable_shrink:
            raise RuntimeError("switchyard.compat.deep_ep: rank masking needs Buffer(..., enable_shrink=True)")
        if self._buffer is None:
            raise RuntimeError("switchyard.compat.deep_ep: no masks before the first low_latency_dispatch")
        return self._buffer


def _rows(tensor: Any, rows: int) -> Any:
    """The first `rows` rows of tensor, zero-padded if it has fewer."""
    if tensor is None:
        return None
    torch = _torch()
    if tensor.shape[0] >= rows:
        return tensor[:rows]
    pad = torch.zeros((rows - tensor.shape[0],) + tuple(tensor.shape[1:]), dtype=tensor.dtype, device=tensor.device)
    if tensor.dtype == torch.int64:
        pad.fill_(-1)
    return torch.cat([tensor, pad])


def _hook(result: Any) -> Optional[Callable[[], None]]:
    hook = result.hook
    if hook is None:
        return None

    def receive() -> None:
        hook()

    return receive


class ElasticBuffer:
    """A subset of DeepEP V2's ``ElasticBuffer`` over the same facade: one buffer sized by
    ``num_max_tokens_per_rank``, ``hidden`` and ``num_topk`` up front.

    ``dispatch(..., do_expand=False)`` is the rank-major dispatch, ``do_expand=True`` the
    expert-major contiguous one (one row per (token, k), segments aligned to
    ``expert_alignment``); ``do_cpu_sync=False`` keeps the counts on the GPU.
    """

    def __init__(self, group: Any, num_max_tokens_per_rank: int, hidden: int, num_topk: int,
                 use_fp8_dispatch: bool = False, allow_hybrid_mode: bool = True,
                 prefer_overlap_with_compute: bool = False, allow_multiple_reduction: bool = True,
                 explicitly_destroy: bool = False, *, num_experts: int = 256, **kwargs: Any):
        for name in ("num_qps", "num_sms"):
            kwargs.pop(name, None)
        _reject_extra("ElasticBuffer", kwargs)
        self.use_fp8_dispatch = use_fp8_dispatch
        self._facade = Buffer(group, max_tokens_per_rank=num_max_tokens_per_rank, hidden=hidden,
                              num_topk=num_topk, num_experts=num_experts, explicitly_destroy=explicitly_destroy)

    @staticmethod
    def get_theoretical_num_sms(num_experts: int, num_topk: int, num_ranks: int = 8, **kwargs: Any) -> int:
        model = _C.SmModelInput()
        model.num_experts, model.topk, model.num_ranks = num_experts, num_topk, num_ranks
        return _C.model_num_sms(model).num_sms

    def destroy(self) -> None:
        self._facade.destroy()

    def dispatch(self, x: Any, topk_idx: Any, topk_weights: Any, num_experts: int,
                 num_max_tokens_per_rank: Optional[int] = None, do_expand: bool = False, do_cpu_sync: bool = True,
                 async_with_compute_stream: bool = False, *, num_sms: int = 0, expert_alignment: int = 1,
                 use_tma_aligned_col_major_sf: bool = False, num_qps: Any = None, **kwargs: Any):
        """(recv_x, recv_topk_idx, recv_topk_weights, handle, event)."""
        if use_tma_aligned_col_major_sf:
            _unsupported("use_tma_aligned_col_major_sf", use_tma_aligned_col_major_sf,
                         "high-throughput scales are row-major")
        _reject_extra("dispatch", kwargs)
        torch = _torch()
        buffer = self._facade._ht_buffer(x if not isinstance(x, tuple) else x[0], topk_idx, num_experts)
        x_data, x_scales = (x if isinstance(x, tuple) else (x, None))
        quantize = self.use_fp8_dispatch and x_scales is None
        result = buffer.dispatch(
            x_data, topk_idx, num_experts, x_scales=x_scales, topk_weights=topk_weights,
            layout=_C.RecvLayout.EXPERT_CONTIGUOUS if do_expand else _C.RecvLayout.RANK_MAJOR,
            expert_alignment=expert_alignment if do_expand else 1, quantize_fp8=quantize,
            counts=_C.CountMode.HOST_SYNCED if do_cpu_sync else _C.CountMode.DEVICE, num_sms=num_sms,
            async_op=async_with_compute_stream)
        recv_x = result.recv_x
        if not do_expand:
            recv_x = recv_x.clone()
        recv_x = (recv_x, result.recv_scales) if result.recv_scales is not None else recv_x
        recv_topk_idx = None if result.recv_topk_idx is None else result.recv_topk_idx.to(torch.int64)
        event = EventOverlap(result.event if async_with_compute_stream else None,
                             (x, topk_idx, topk_weights) if async_with_compute_stream else None)
        return recv_x, recv_topk_idx, result.recv_topk_weights, result.handle, event

    def combine(self, x: Any, handle: _C.DispatchHandle, topk_weights: Any = None, *, num_sms: int = 0,
                async_with_compute_stream: bool = False, **kwargs: Any):
        """(combined_x, event): weighted by topk_weights (home-rank [T, K]) for an expanded
        dispatch, the unweighted sum otherwise."""
        _reject_extra("combine", kwargs)
        buffer = self._facade._buffer
        expanded = handle.layout != _C.RecvLayout.RANK_MAJOR
        result = buffer.combine(handle, x, topk_weights=topk_weights if expanded else None,
                                weighted=expanded and topk_weights is not None, num_sms=num_sms,
                                async_op=async_with_compute_stream)
        event = EventOverlap(result.event if async_with_compute_stream else None,
                             (x, topk_weights) if async_with_compute_stream else None)
        return result.out, event
