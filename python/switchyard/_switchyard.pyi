"""
Switchyard: expert-parallel MoE dispatch/combine (native binding of the C++ API)
"""

from collections.abc import Sequence
import enum

from switchyard import (
    CompileError as CompileError,
    CudaError as CudaError,
    Error as Error,
    InvalidArgument as InvalidArgument,
    PeerFailedError as PeerFailedError,
    PoisonedError as PoisonedError,
    TimeoutError as TimeoutError,
    UnsupportedError as UnsupportedError
)
from switchyard import reference as reference


version_info: tuple = (0, 2, 0)

class RecvLayout(enum.Enum):
    """How received rows are laid out (DESIGN.md §2)."""

    RANK_MAJOR = 0

    EXPERT_CONTIGUOUS = 1

    EXPERT_MASKED = 2

class ScaleFormat(enum.Enum):
    """Scales of an FP8 payload, one per 128 channels."""

    NONE = 0

    FLOAT32 = 1

    UE8M0 = 2

class CountMode(enum.Enum):
    """Host-synced counts (exact sizes) or device counts (graph-capturable)."""

    HOST_SYNCED = 0

    DEVICE = 1

class OpTimelineKind(enum.Enum):
    """
    The traced ops (an LL op with a receive hook is traced as its two halves).
    """

    HT_DISPATCH = 0

    HT_COMBINE = 1

    LL_DISPATCH_SEND = 2

    LL_DISPATCH_RECEIVE = 3

    LL_DISPATCH = 4

    LL_COMBINE_SEND = 5

    LL_COMBINE_RECEIVE = 6

    LL_COMBINE = 7

class OpTimeline:
    """
    When a traced op's kernels reached the marks of its timeline (include/switchyard/op_timeline.hpp): us[i] is mark i in microseconds after mark 0, NaN where it was not reached.
    """

    @property
    def op(self) -> str: ...

    @property
    def marks(self) -> list[str]: ...

    @property
    def us(self) -> list[float]: ...

    @property
    def start_ns(self) -> int:
        """Mark 0 on the GPU's global timer (ns): lines up the timelines of ranks on one GPU."""

    def empty(self) -> bool: ...

    def at(self, name: str) -> float:
        """The time of the mark called `name` (NaN when absent or not reached)."""

class BufferConfig:
    """
    The capacities a Buffer is sized for (include/switchyard/config.hpp). Every rank passes the same configuration. Construct with keyword arguments, e.g. BufferConfig(max_tokens_per_rank=128, enable_low_latency=True).
    """

    def __init__(self, **kwargs) -> None: ...

    @property
    def max_tokens_per_rank(self) -> int: ...

    @max_tokens_per_rank.setter
    def max_tokens_per_rank(self, arg: int, /) -> None: ...

    @property
    def max_hidden(self) -> int: ...

    @max_hidden.setter
    def max_hidden(self, arg: int, /) -> None: ...

    @property
    def max_topk(self) -> int: ...

    @max_topk.setter
    def max_topk(self, arg: int, /) -> None: ...

    @property
    def max_experts(self) -> int: ...

    @max_experts.setter
    def max_experts(self, arg: int, /) -> None: ...

    @property
    def enable_high_throughput(self) -> bool: ...

    @enable_high_throughput.setter
    def enable_high_throughput(self, arg: bool, /) -> None: ...

    @property
    def enable_low_latency(self) -> bool: ...

    @enable_low_latency.setter
    def enable_low_latency(self, arg: bool, /) -> None: ...

    @property
    def ll_max_tokens_per_rank(self) -> int: ...

    @ll_max_tokens_per_rank.setter
    def ll_max_tokens_per_rank(self, arg: int, /) -> None: ...

    @property
    def timeout_seconds(self) -> float: ...

    @timeout_seconds.setter
    def timeout_seconds(self, arg: float, /) -> None: ...

    @property
    def emulated_nodes(self) -> int: ...

    @emulated_nodes.setter
    def emulated_nodes(self, arg: int, /) -> None: ...

    @property
    def num_sms(self) -> int: ...

    @num_sms.setter
    def num_sms(self, arg: int, /) -> None: ...

    @property
    def ll_mask_unresponsive_ranks(self) -> bool: ...

    @ll_mask_unresponsive_ranks.setter
    def ll_mask_unresponsive_ranks(self, arg: bool, /) -> None: ...

    @property
    def ht_mask_unresponsive_ranks(self) -> bool: ...

    @ht_mask_unresponsive_ranks.setter
    def ht_mask_unresponsive_ranks(self, arg: bool, /) -> None: ...

    @property
    def ll_zero_copy_combine(self) -> bool: ...

    @ll_zero_copy_combine.setter
    def ll_zero_copy_combine(self, arg: bool, /) -> None: ...

    @property
    def launch_on_caller_stream(self) -> bool: ...

    @launch_on_caller_stream.setter
    def launch_on_caller_stream(self, arg: bool, /) -> None: ...

    def __repr__(self) -> str: ...

class RankPlacement:
    @property
    def rank(self) -> int: ...

    @property
    def host_id(self) -> int: ...

    @property
    def process_id(self) -> int: ...

    @property
    def device(self) -> int: ...

    @property
    def gpu_bus_id(self) -> str: ...

class Topology:
    """Where the ranks run (include/switchyard/topology.hpp)."""

    @property
    def rank(self) -> int: ...

    @property
    def num_ranks(self) -> int: ...

    @property
    def placements(self) -> list[RankPlacement]: ...

    @property
    def node_of_rank(self) -> list[int]: ...

    @property
    def num_nodes(self) -> int: ...

    @property
    def emulated_nodes(self) -> bool: ...

    @property
    def ranks_on_my_gpu(self) -> int: ...

    @property
    def index_on_my_gpu(self) -> int: ...

    def num_gpus(self) -> int: ...

    def describe(self) -> str: ...

    def __repr__(self) -> str: ...

def buffer_size_hint(config: BufferConfig, num_ranks: int, num_nodes: int = 1) -> int:
    """
    Bytes of the symmetric buffer (control workspace + HT and LL regions) each rank allocates for `config` with `num_ranks` ranks: what Buffer.buffer_bytes reports once created. Outputs of expert-major layouts come from a separate per-buffer pool.
    """

def buffer_size_breakdown(config: BufferConfig, num_ranks: int, num_nodes: int = 1) -> dict:
    """
    buffer_size_hint by region (bytes; regions are aligned, the total to 2 MiB), and beside the symmetric buffer the output pool reserved at creation and the routing scratch (device_total: all of it).
    """

def ht_output_shapes(config: BufferConfig, num_ranks: int, *, num_tokens: int, hidden: int, topk: int, num_experts: int, x_dtype: str = 'bf16', x_scales: ScaleFormat = ScaleFormat.NONE, quantize_fp8: bool = False, quantize_format: ScaleFormat = ScaleFormat.FLOAT32, has_weights: bool = False, layout: RecvLayout = RecvLayout.RANK_MAJOR, expert_alignment: int = 1, counts: CountMode = CountMode.HOST_SYNCED, host_num_recv_rows: int | None = None) -> dict:
    """
    Every tensor an HT dispatch of this shape returns and what its combine takes (y) and returns, as {name: (dtype, shape, strides) or None}, plus num_recv_rows: exact with host_num_recv_rows (a host-synced result's), else the worst case that device counts allocate.
    """

def ll_output_shapes(config: BufferConfig, num_ranks: int, *, num_tokens: int, hidden: int, topk: int, num_experts: int, index_dtype: str = 'int64', use_fp8: bool = True, scale_format: ScaleFormat = ScaleFormat.FLOAT32, layout: RecvLayout = RecvLayout.EXPERT_MASKED, expert_alignment: int = 1) -> dict:
    """
    Every tensor an LL dispatch of this shape returns and what its combine takes (y) and returns, as {name: (dtype, shape, strides) or None}.
    """

def ht_load_kernels(device: int, *, hidden: int, topk: int, x_dtype: str = 'bf16', x_scales: ScaleFormat = ScaleFormat.NONE, quantize_fp8: bool = False, quantize_format: ScaleFormat = ScaleFormat.FLOAT32, layout: RecvLayout = RecvLayout.RANK_MAJOR, num_nodes: int = 1, network_backend: str = 'emulated') -> None:
    """
    Load (JIT-compiling on a miss) every HT kernel a dispatch of this shape and its combines can use, from shapes alone: once per process and device for every rank in it, before the first HT op (required when ranks share a GPU).
    """

def ll_load_kernels(device: int, *, hidden: int, topk: int, index_dtype: str = 'int64', use_fp8: bool = True, scale_format: ScaleFormat = ScaleFormat.FLOAT32, layout: RecvLayout = RecvLayout.EXPERT_MASKED, num_nodes: int = 1, network_backend: str = 'emulated') -> None:
    """
    Load (JIT-compiling on a miss) every LL kernel a dispatch of this shape and its combines can use, from shapes alone: once per process and device, before the first LL op (required when ranks share a GPU). Across nodes: num_nodes and the network backend (EMULATED or GIN).
    """

class SmModelOp(enum.Enum):
    DISPATCH = 0

    COMBINE = 1

class ArchBandwidth:
    def __init__(self) -> None: ...

    @property
    def sm_read_gbps(self) -> float: ...

    @sm_read_gbps.setter
    def sm_read_gbps(self, arg: float, /) -> None: ...

    @property
    def sm_write_gbps(self) -> float: ...

    @sm_write_gbps.setter
    def sm_write_gbps(self, arg: float, /) -> None: ...

    @property
    def nvlink_gbps(self) -> float: ...

    @nvlink_gbps.setter
    def nvlink_gbps(self, arg: float, /) -> None: ...

    @property
    def rdma_gbps(self) -> float: ...

    @rdma_gbps.setter
    def rdma_gbps(self, arg: float, /) -> None: ...

class SmModelInput:
    def __init__(self) -> None: ...

    @property
    def num_experts(self) -> int: ...

    @num_experts.setter
    def num_experts(self, arg: int, /) -> None: ...

    @property
    def topk(self) -> int: ...

    @topk.setter
    def topk(self, arg: int, /) -> None: ...

    @property
    def num_ranks(self) -> int: ...

    @num_ranks.setter
    def num_ranks(self, arg: int, /) -> None: ...

    @property
    def num_nodes(self) -> int: ...

    @num_nodes.setter
    def num_nodes(self, arg: int, /) -> None: ...

    @property
    def num_device_sms(self) -> int: ...

    @num_device_sms.setter
    def num_device_sms(self, arg: int, /) -> None: ...

    @property
    def max_sms(self) -> int: ...

    @max_sms.setter
    def max_sms(self, arg: int, /) -> None: ...

    @property
    def headroom(self) -> float: ...

    @headroom.setter
    def headroom(self, arg: float, /) -> None: ...

    @property
    def bandwidth(self) -> ArchBandwidth: ...

    @bandwidth.setter
    def bandwidth(self, arg: ArchBandwidth, /) -> None: ...

    @property
    def op(self) -> SmModelOp: ...

    @op.setter
    def op(self, arg: SmModelOp, /) -> None: ...

    @property
    def combine_send_fraction(self) -> float: ...

    @combine_send_fraction.setter
    def combine_send_fraction(self, arg: float, /) -> None: ...

class SmModelResult:
    @property
    def expected_ranks_per_token(self) -> float: ...

    @property
    def expected_nodes_per_token(self) -> float: ...

    @property
    def link_bytes_per_token(self) -> float: ...

    @property
    def sm_read_bytes_per_token(self) -> float: ...

    @property
    def sm_write_bytes_per_token(self) -> float: ...

    @property
    def link_gbps(self) -> float: ...

    @property
    def bottleneck(self) -> str: ...

    @property
    def exact_sms(self) -> float: ...

    @property
    def num_sms(self) -> int: ...

def model_num_sms(input: SmModelInput) -> SmModelResult:
    """The analytical SM model (DESIGN.md §7)."""

def expected_distinct_groups(num_experts: int, topk: int, num_groups: int) -> float: ...

def default_arch_bandwidth(compute_capability_major: int) -> ArchBandwidth: ...

class PeerStatus(enum.Enum):
    """What a communicator knows about a rank's process."""

    UNKNOWN = 0

    ALIVE = 1

    GONE = 2

def shrunk_rank(old_rank: int, gone: Sequence[int]) -> int:
    """
    A rank's rank among the survivors after Communicator.shrink(gone), or -1 if it is gone.
    """

class Communicator:
    """
    How ranks find each other on the host (bootstrap): rank, size, all-gather of bytes, barrier. Made by the functions below; switchyard.Buffer makes one from a torch.distributed group.
    """

    def rank(self) -> int: ...

    def size(self) -> int: ...

    def describe(self) -> str: ...

    def peer_status(self, rank: int) -> PeerStatus:
        """
        Whether rank's process is alive, as far as this communicator can tell without communicating.
        """

    def gone_ranks(self) -> list[int]:
        """The ranks whose processes are gone, ascending."""

    def shrink(self, gone: Sequence[int], timeout_seconds: float = 100.0) -> Communicator:
        """
        The survivors' communicator (every survivor passes the same gone ranks), ranks renumbered in the old order: rebuild a Buffer on it after a peer died (docs/python.md).
        """

    def allgather(self, data: bytes, timeout_seconds: float = 100.0) -> list:
        """Every rank contributes equally long bytes; returns all of them."""

    def barrier(self, timeout_seconds: float = 100.0) -> None: ...

    def __repr__(self) -> str: ...

def make_in_process_communicators(size: int) -> list[Communicator]:
    """
    Ranks as threads of one process: `size` communicators sharing one rendezvous.
    """

def make_local_process_communicator(key: str, rank: int, size: int, timeout_seconds: float = 100.0) -> Communicator:
    """
    Ranks as processes on one host, meeting under `key` (rank 0 hosts the rendezvous).
    """

def wrap_nccl_communicator(nccl_comm: int, device: int) -> Communicator:
    """Wrap an existing ncclComm_t (given as an int pointer)."""

def python_communicator(group: object, rank: int, size: int, name: str = 'python') -> Communicator:
    """
    A Communicator whose collectives call group.allgather(bytes) -> list[bytes] and group.barrier().
    """

class Framework(enum.Enum):
    """Whose tensors an op returns (that of its first tensor argument)."""

    NONE = 0

    TORCH = 1

    CUPY = 2

    JAX = 3

    NUMPY = 4

def detect_framework(tensor: object | None) -> Framework: ...

class DLPackTensor:
    """
    A tensor the library returned, for frameworks without a direct conversion: pass it to any from_dlpack (torch.from_dlpack, cupy.from_dlpack, numpy.from_dlpack for host memory). Each __dlpack__ call returns a new capsule sharing the memory.
    """

    def __dlpack__(self, *, stream: object | None = None, max_version: object | None = None, dl_device: object | None = None, copy: object | None = None) -> object:
        """
        A DLPack capsule of this tensor. The stream argument is not needed: outputs are ordered by the op's stream semantics (the caller's stream waits for a synchronous op; wait on the Event otherwise).
        """

    def __dlpack_device__(self) -> tuple: ...

    @property
    def shape(self) -> tuple: ...

    @property
    def strides(self) -> tuple: ...

    @property
    def dtype(self) -> str: ...

    @property
    def data_ptr(self) -> int: ...

    def __repr__(self) -> str: ...

class Event:
    """
    The completion of an op (switchyard::OpEvent). Asynchronous ops keep their inputs alive in it until the op is done.
    """

    def wait(self, stream: object | None = None) -> None:
        """
        Make `stream` (default: the framework's current stream) wait for the op. Enqueued; the host does not block; graph-capturable.
        """

    def current_stream_wait(self) -> None:
        """
        The framework's current stream waits for the op (DeepEP's name for wait()).
        """

    def synchronize(self) -> None:
        """
        Block the host until the op is done (errors the kernels recorded are raised by Buffer.check_errors()).
        """

    def done(self) -> bool:
        """Whether the op has finished."""

    @property
    def valid(self) -> bool: ...

    @property
    def cuda_event(self) -> int:
        """The cudaEvent_t as an int."""

    @staticmethod
    def record(stream: object | None = None, framework: Framework = Framework.NONE) -> Event:
        """
        An event recorded now on `stream` (None: the current stream of `framework` on the current device).
        """

    def __repr__(self) -> str: ...

class DispatchHandle:
    """
    The routing of one high-throughput dispatch: pass it to combine and cached_dispatch.
    """

    @property
    def layout(self) -> RecvLayout: ...

    @property
    def framework(self) -> str: ...

class LowLatencyHandle:
    """The routing of one low-latency dispatch: pass it to ll_combine."""

    @property
    def framework(self) -> str: ...

class DispatchResult:
    """
    Outputs of dispatch / cached_dispatch (DESIGN.md §2). Rank-major tensors are views into the buffer's receive region, valid until the next dispatch on the buffer (clone to keep); expert-major ones are owned.
    """

    @property
    def recv_x(self) -> object: ...

    @property
    def recv_scales(self) -> object: ...

    @property
    def recv_topk_idx(self) -> object: ...

    @property
    def recv_topk_weights(self) -> object: ...

    @property
    def num_recv_tokens_per_expert(self) -> object: ...

    @property
    def num_recv_rows(self) -> object: ...

    @property
    def host_num_recv_rows(self) -> object: ...

    @property
    def host_num_recv_tokens_per_expert(self) -> object: ...

    @property
    def handle(self) -> object: ...

    @property
    def event(self) -> object: ...

class CombineResult:
    """Outputs of combine."""

    @property
    def out(self) -> object: ...

    @property
    def combined_topk_weights(self) -> object: ...

    @property
    def event(self) -> object: ...

class LowLatencyDispatchResult:
    """Outputs of ll_dispatch."""

    @property
    def recv_x(self) -> object: ...

    @property
    def recv_scales(self) -> object: ...

    @property
    def recv_count(self) -> object: ...

    @property
    def recv_expert_offsets(self) -> object: ...

    @property
    def handle(self) -> object: ...

    @property
    def event(self) -> object: ...

    @property
    def hook(self) -> object: ...

class LowLatencyCombineResult:
    """Outputs of ll_combine."""

    @property
    def out(self) -> object: ...

    @property
    def event(self) -> object: ...

    @property
    def hook(self) -> object: ...

class Buffer:
    """
    One rank's communication buffer (include/switchyard/buffer.hpp). Creating and destroying it is collective. switchyard.Buffer (the Python class) builds the communicator from a torch.distributed group; this native constructor takes a Communicator.
    """

    def __init__(self, communicator: Communicator, device: int, config: BufferConfig) -> None: ...

    @property
    def framework(self) -> Framework:
        """
        Whose stream stream=None means where an op has no tensor to tell (barrier), and whose tensors outputs are when the first tensor argument has no framework.
        """

    @framework.setter
    def framework(self, arg: Framework, /) -> None: ...

    @property
    def rank(self) -> int: ...

    @property
    def num_ranks(self) -> int: ...

    @property
    def device(self) -> int: ...

    @property
    def config(self) -> BufferConfig: ...

    @property
    def topology(self) -> Topology: ...

    @property
    def buffer_bytes(self) -> int:
        """Bytes of this rank's symmetric allocation."""

    @property
    def comm_stream(self) -> int:
        """The communication stream (cudaStream_t as an int)."""

    @property
    def sm_budget(self) -> int: ...

    @property
    def destroyed(self) -> bool: ...

    def barrier(self, stream: object | None = None) -> None:
        """
        Cross-rank barrier on the GPU: `stream` continues once every rank arrived.
        """

    def get_dispatch_layout(self, topk_idx: object, num_experts: int, *, num_tokens_per_rank: object, num_tokens_per_expert: object, token_rank_slot: object, token_in_rank: object | None = None, token_expert_pos: object | None = None, stream: object | None = None) -> None:
        """
        Dispatch layout of topk_idx into caller-allocated device tensors (int32 [R], int32 [E], int32 [T, R], optional bool/uint8 [T, R], optional int32 [T, K]). Synchronous with the caller's stream.
        """

    def dispatch(self, x: object, topk_idx: object, num_experts: int, *, x_scales: object | None = None, topk_weights: object | None = None, layout: object = RecvLayout.RANK_MAJOR, expert_alignment: int = 1, zero_padding: bool = False, quantize_fp8: bool = False, quantize_format: object = ScaleFormat.FLOAT32, counts: object = CountMode.HOST_SYNCED, num_sms: int = 0, after: object | None = None, async_op: bool = False, stream: object | None = None) -> DispatchResult:
        """
        High-throughput dispatch of x ([T, H] bf16, or fp8 with x_scales) to the ranks owning its top-k experts.
        """

    def cached_dispatch(self, handle: DispatchHandle, x: object, *, x_scales: object | None = None, topk_weights: object | None = None, quantize_fp8: bool = False, quantize_format: object = ScaleFormat.FLOAT32, num_sms: int = 0, after: object | None = None, async_op: bool = False, stream: object | None = None) -> DispatchResult:
        """
        Dispatch new data with the routing of `handle` (byte-identical layouts; the backward of combine).
        """

    def combine(self, handle: DispatchHandle, y: object, *, row_weights: object | None = None, topk_weights: object | None = None, bias0: object | None = None, bias1: object | None = None, weighted: bool = False, hierarchical: bool = False, out: object | None = None, num_sms: int = 0, after: object | None = None, async_op: bool = False, stream: object | None = None) -> CombineResult:
        """
        Combine rows laid out as `handle`'s dispatch produced them back to their home ranks (also the backward of dispatch).
        """

    def ll_dispatch(self, x: object, topk_idx: object, num_experts: int, *, topk_weights: object | None = None, use_fp8: bool = True, scale_format: object = ScaleFormat.FLOAT32, cumulative_local_expert_recv_stats: object | None = None, wait_time_stats: object | None = None, return_recv_hook: bool = False, layout: object = RecvLayout.EXPERT_MASKED, expert_alignment: int = 1, zero_padding: bool = False, after: object | None = None, async_op: bool = False, stream: object | None = None) -> LowLatencyDispatchResult:
        """
        Low-latency dispatch (one kernel, no host round-trip, CUDA-graph capturable).
        """

    def ll_combine(self, handle: LowLatencyHandle, y: object, topk_idx: object, topk_weights: object | None = None, *, hierarchical: bool = False, out: object | None = None, zero_copy: bool = False, return_recv_hook: bool = False, wait_time_stats: object | None = None, after: object | None = None, async_op: bool = False, stream: object | None = None) -> LowLatencyCombineResult:
        """
        Low-latency combine: out[t] = sum_k w[t][k] * y(t, k) (flat) or the hierarchical reduction.
        """

    def ll_load_kernels(self, x: object, topk_idx: object, num_experts: int, *, topk_weights: object | None = None, use_fp8: bool = True, scale_format: object = ScaleFormat.FLOAT32, return_recv_hook: bool = False, layout: object = RecvLayout.EXPERT_MASKED, expert_alignment: int = 1, zero_padding: bool = False) -> None:
        """
        Load (JIT-compiling on a miss) every LL kernel ll_dispatch with these arguments and its ll_combine can use. Required before the first LL op when ranks share a GPU.
        """

    def ll_combine_input(self, handle: LowLatencyHandle) -> object:
        """
        The buffer's LL send area as bf16 [L, R*T_ll, H] for a zero-copy combine (needs BufferConfig.ll_zero_copy_combine and the masked layout).
        """

    def ll_query_mask(self) -> list[int]: ...

    def ll_set_mask(self, rank: int, masked: bool) -> None: ...

    def ll_clear_mask(self) -> None: ...

    def ht_query_mask(self) -> list[int]: ...

    def ht_set_mask(self, rank: int, masked: bool) -> None: ...

    def ht_clear_mask(self) -> None: ...

    def check_errors(self) -> None: ...

    def set_op_tracing(self, on: bool) -> None:
        """
        Trace this buffer's ops (op timelines, without printing); turn it on between ops.
        """

    def op_timeline(self, kind: OpTimelineKind) -> OpTimeline:
        """
        The latest traced op of `kind` whose kernels have finished (synchronize first); empty when none finished since the previous call for that kind.
        """

    def synchronize(self) -> None: ...

    def reset(self) -> None:
        """
        Collective: clear a recorded error and the control workspace so the buffer can be used again.
        """

    def destroy(self) -> None:
        """
        Collective: free the buffer now (every rank calls it; later ops raise).
        """

    @property
    def num_pending(self) -> int:
        """Asynchronous ops whose inputs are still held (pruned at each op)."""
