"""Switchyard: expert-parallel MoE dispatch/combine across GPUs.

A thin layer over the C++ library: tensors of any DLPack framework in (torch, CuPy, JAX),
tensors of the same framework out, without copies; ops ordered after the framework's current
stream; results carry an Event. See docs/python.md.

    import switchyard, torch.distributed as dist
    buffer = switchyard.Buffer(dist.group.WORLD, max_tokens_per_rank=128, max_hidden=7168,
                               enable_high_throughput=False, enable_low_latency=True)
    result = buffer.ll_dispatch(x, topk_idx, num_experts=256)
    out = buffer.ll_combine(result.handle, expert_out, topk_idx, topk_weights).out
"""

from . import _switchyard
from ._switchyard import (
    ArchBandwidth,
    BufferConfig,
    CombineResult,
    CompileError,
    Communicator,
    CountMode,
    CudaError,
    DispatchHandle,
    DispatchResult,
    DLPackTensor,
    Error,
    Event,
    Framework,
    InvalidArgument,
    LowLatencyCombineResult,
    LowLatencyDispatchResult,
    LowLatencyHandle,
    OpTimeline,
    OpTimelineKind,
    PeerFailedError,
    PeerStatus,
    PoisonedError,
    RankPlacement,
    RecvLayout,
    ScaleFormat,
    SmModelInput,
    SmModelOp,
    SmModelResult,
    TimeoutError,
    Topology,
    UnsupportedError,
    buffer_size_breakdown,
    default_arch_bandwidth,
    detect_framework,
    expected_distinct_groups,
    ht_load_kernels,
    ht_output_shapes,
    ll_load_kernels,
    ll_output_shapes,
    make_in_process_communicators,
    make_local_process_communicator,
    model_num_sms,
    python_communicator,
    shrunk_rank,
    version_info,
    wrap_nccl_communicator,
)
from . import reference
from ._buffer import Buffer, buffer_size_hint, record_event

__version__: str = _switchyard.__version__

__all__ = [
    "ArchBandwidth", "Buffer", "BufferConfig", "CombineResult", "CompileError", "Communicator",
    "CountMode", "CudaError", "DispatchHandle", "DispatchResult", "DLPackTensor", "Error", "Event",
    "Framework", "InvalidArgument", "LowLatencyCombineResult", "LowLatencyDispatchResult",
    "LowLatencyHandle", "OpTimeline", "OpTimelineKind", "PeerFailedError", "PeerStatus", "PoisonedError",
    "RankPlacement", "RecvLayout",
    "ScaleFormat",
    "SmModelInput", "SmModelOp", "SmModelResult", "TimeoutError", "Topology", "UnsupportedError",
    "buffer_size_breakdown", "buffer_size_hint", "default_arch_bandwidth", "detect_framework",
    "expected_distinct_groups", "ht_load_kernels", "ht_output_shapes", "ll_load_kernels", "ll_output_shapes",
    "make_in_process_communicators", "make_local_process_communicator", "model_num_sms",
    "python_communicator", "record_event", "reference", "shrunk_rank", "version_info",
    "wrap_nccl_communicator", "__version__",
]
