"""The CPU reference implementation of Switchyard's semantics (DESIGN.md §2).

It takes every rank's inputs and returns every rank's outputs in host memory, bit-exact with the
GPU kernels: the oracle of the tests, usable to check an integration. bf16 and fp8 values are
raw bits (uint16 / uint8 arrays); array fields are flat, as in the C++ structs, and read as NumPy
copies. Example::

    from switchyard import reference as ref
    problem = ref.Problem(num_ranks=2, num_experts=8, hidden=256, topk=2, max_tokens_per_rank=16)
    inputs = [ref.DispatchInput(num_tokens=16, x_bf16=x_bits[s], topk_idx=idx[s]) for s in range(2)]
    result = ref.dispatch(problem, inputs)
    rows = result.outputs[0].x_bf16.reshape(-1, 256)
"""

from __future__ import annotations

from typing import Any

from . import _switchyard

_native = _switchyard.reference

ScaleFormat = _native.ScaleFormat
Payload = _native.Payload
RecvLayout = _native.RecvLayout
Problem = _native.Problem
DispatchInput = _native.DispatchInput
DispatchOptions = _native.DispatchOptions
DispatchOutput = _native.DispatchOutput
Routing = _native.Routing
GlobalDispatch = _native.GlobalDispatch
CombineInput = _native.CombineInput
CombineHomeInput = _native.CombineHomeInput
CombineOptions = _native.CombineOptions
CombineOutput = _native.CombineOutput

bf16_to_float = _native.bf16_to_float
float_to_bf16 = _native.float_to_bf16
e4m3_to_float = _native.e4m3_to_float
float_to_e4m3_satfinite = _native.float_to_e4m3_satfinite
num_scale_words = _native.num_scale_words
quantize_token = _native.quantize_token
validate_problem = _native.validate_problem
validate_routing = _native.validate_routing
dispatch = _native.dispatch
cached_dispatch = _native.cached_dispatch
combine = _native.combine


def bf16_bits(tensor: Any):
    """The raw bits of a bf16 tensor (torch CPU or CUDA, any shape) as a flat NumPy uint16 array:
    what the reference takes and returns for bf16 payloads."""
    import numpy as np

    if hasattr(tensor, "view") and "torch" in type(tensor).__module__:
        import torch

        return tensor.detach().contiguous().view(torch.int16).cpu().numpy().view(np.uint16).reshape(-1)
    return np.ascontiguousarray(tensor).view(np.uint16).reshape(-1)


__all__ = [
    "ScaleFormat", "Payload", "RecvLayout", "Problem", "DispatchInput", "DispatchOptions", "DispatchOutput",
    "Routing", "GlobalDispatch", "CombineInput", "CombineHomeInput", "CombineOptions", "CombineOutput",
    "bf16_to_float", "float_to_bf16", "e4m3_to_float", "float_to_e4m3_satfinite", "num_scale_words",
    "quantize_token", "validate_problem", "validate_routing", "dispatch", "cached_dispatch", "combine",
    "bf16_bits",
]
