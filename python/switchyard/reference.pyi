import numpy
import numpy.typing
"""
The CPU reference of Switchyard's semantics (DESIGN.md §2): every rank's inputs in, every rank's outputs out, bit-exact with the GPU. bf16 and fp8 values are raw bits (uint16 / uint8).
"""

from collections.abc import Sequence
import enum

import switchyard._switchyard
from switchyard._switchyard import (
    RecvLayout as RecvLayout,
    ScaleFormat as ScaleFormat
)


def bf16_to_float(bits: object) -> object:
    """bf16 bit patterns -> float32 (flat)."""

def float_to_bf16(values: object) -> object:
    """float32 -> bf16 bit patterns, round to nearest even (flat)."""

def e4m3_to_float(bits: object) -> object: ...

def float_to_e4m3_satfinite(values: object) -> object: ...

class Payload(enum.Enum):
    BF16 = 0

    FP8 = 1

def num_scale_words(hidden: int, format: switchyard._switchyard.ScaleFormat) -> int: ...

def quantize_token(x_bf16: object, format: switchyard._switchyard.ScaleFormat) -> tuple:
    """
    Quantize one token (DESIGN.md §2): returns (e4m3 bytes, 32-bit scale words).
    """

class Problem:
    def __init__(self, **kwargs) -> None: ...

    @property
    def num_ranks(self) -> int: ...

    @num_ranks.setter
    def num_ranks(self, arg: int, /) -> None: ...

    @property
    def num_experts(self) -> int: ...

    @num_experts.setter
    def num_experts(self, arg: int, /) -> None: ...

    @property
    def hidden(self) -> int: ...

    @hidden.setter
    def hidden(self, arg: int, /) -> None: ...

    @property
    def topk(self) -> int: ...

    @topk.setter
    def topk(self, arg: int, /) -> None: ...

    @property
    def max_tokens_per_rank(self) -> int: ...

    @max_tokens_per_rank.setter
    def max_tokens_per_rank(self, arg: int, /) -> None: ...

    def local_experts(self) -> int: ...

def validate_problem(problem: Problem) -> None: ...

def validate_routing(problem: Problem, rank: int, num_tokens: int, topk_idx: object) -> None: ...

class DispatchInput:
    def __init__(self, **kwargs) -> None: ...

    @property
    def num_tokens(self) -> int: ...

    @num_tokens.setter
    def num_tokens(self, arg: int, /) -> None: ...

    @property
    def payload(self) -> Payload: ...

    @payload.setter
    def payload(self, arg: Payload, /) -> None: ...

    @property
    def x_bf16(self) -> object: ...

    @x_bf16.setter
    def x_bf16(self, arg: object, /) -> None: ...

    @property
    def x_fp8(self) -> object: ...

    @x_fp8.setter
    def x_fp8(self, arg: object, /) -> None: ...

    @property
    def scale_format(self) -> switchyard._switchyard.ScaleFormat: ...

    @scale_format.setter
    def scale_format(self, arg: switchyard._switchyard.ScaleFormat, /) -> None: ...

    @property
    def scales(self) -> object: ...

    @scales.setter
    def scales(self, arg: object, /) -> None: ...

    @property
    def topk_idx(self) -> object: ...

    @topk_idx.setter
    def topk_idx(self, arg: object, /) -> None: ...

    @property
    def topk_weights(self) -> object: ...

    @topk_weights.setter
    def topk_weights(self, arg: object, /) -> None: ...

class DispatchOptions:
    def __init__(self, **kwargs) -> None: ...

    @property
    def layout(self) -> switchyard._switchyard.RecvLayout: ...

    @layout.setter
    def layout(self, arg: switchyard._switchyard.RecvLayout, /) -> None: ...

    @property
    def expert_alignment(self) -> int: ...

    @expert_alignment.setter
    def expert_alignment(self, arg: int, /) -> None: ...

    @property
    def zero_padding(self) -> bool: ...

    @zero_padding.setter
    def zero_padding(self, arg: bool, /) -> None: ...

    @property
    def quantize(self) -> bool: ...

    @quantize.setter
    def quantize(self, arg: bool, /) -> None: ...

    @property
    def quantize_format(self) -> switchyard._switchyard.ScaleFormat: ...

    @quantize_format.setter
    def quantize_format(self, arg: switchyard._switchyard.ScaleFormat, /) -> None: ...

    @property
    def absent_ranks(self) -> list[bool]: ...

    @absent_ranks.setter
    def absent_ranks(self, arg: Sequence[bool], /) -> None: ...

class DispatchOutput:
    @property
    def layout(self) -> switchyard._switchyard.RecvLayout: ...

    @property
    def num_rows(self) -> int: ...

    @property
    def payload(self) -> Payload: ...

    @property
    def scale_format(self) -> switchyard._switchyard.ScaleFormat: ...

    @property
    def x_bf16(self) -> object: ...

    @property
    def x_fp8(self) -> object: ...

    @property
    def scales(self) -> object: ...

    @property
    def topk_idx(self) -> object: ...

    @property
    def topk_weights(self) -> object: ...

    @property
    def sources(self) -> object: ...

    @property
    def num_tokens_per_expert(self) -> object: ...

    @property
    def num_rows_per_source(self) -> object: ...

    @property
    def expert_offsets(self) -> object: ...

class Routing:
    """The routing of one dispatch for all ranks (what a handle holds)."""

    @property
    def problem(self) -> Problem: ...

    @property
    def options(self) -> DispatchOptions: ...

    @property
    def num_tokens(self) -> list[int]: ...

class GlobalDispatch:
    """Every rank's dispatch output and the routing."""

    @property
    def outputs(self) -> list[DispatchOutput]: ...

    @property
    def routing(self) -> Routing: ...

def dispatch(problem: Problem, inputs: Sequence[DispatchInput], options: DispatchOptions = ...) -> GlobalDispatch:
    """Dispatch every rank's input (one DispatchInput per rank)."""

def cached_dispatch(routing: Routing, inputs: Sequence[DispatchInput]) -> list[DispatchOutput]:
    """New data with the routing of an earlier dispatch (topk_idx ignored)."""

class CombineInput:
    def __init__(self, **kwargs) -> None: ...

    @property
    def y(self) -> object: ...

    @y.setter
    def y(self, arg: object, /) -> None: ...

    @property
    def row_weights(self) -> object: ...

    @row_weights.setter
    def row_weights(self, arg: object, /) -> None: ...

class CombineHomeInput:
    def __init__(self, **kwargs) -> None: ...

    @property
    def topk_weights(self) -> object: ...

    @topk_weights.setter
    def topk_weights(self, arg: object, /) -> None: ...

    @property
    def bias0(self) -> object: ...

    @bias0.setter
    def bias0(self, arg: object, /) -> None: ...

    @property
    def bias1(self) -> object: ...

    @bias1.setter
    def bias1(self, arg: object, /) -> None: ...

class CombineOptions:
    def __init__(self, **kwargs) -> None: ...

    @property
    def weighted(self) -> bool: ...

    @weighted.setter
    def weighted(self, arg: bool, /) -> None: ...

    @property
    def hierarchical(self) -> bool: ...

    @hierarchical.setter
    def hierarchical(self, arg: bool, /) -> None: ...

    @property
    def absent_ranks(self) -> list[bool]: ...

    @absent_ranks.setter
    def absent_ranks(self, arg: Sequence[bool], /) -> None: ...

class CombineOutput:
    @property
    def out(self) -> object: ...

    @property
    def combined_topk_weights(self) -> object: ...

def combine(routing: Routing, inputs: Sequence[CombineInput], home_inputs: object | None = None, options: CombineOptions = ...) -> list[CombineOutput]:
    """
    Combine back to every home rank (one CombineInput per receiving rank; home_inputs: one per home rank or None).
    """


def bf16_bits(tensor: object) -> numpy.typing.NDArray[numpy.uint16]:
    """The raw bits of a bf16 tensor as a flat NumPy uint16 array."""
