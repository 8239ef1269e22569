"""switchyard.Buffer: the native Buffer, created from a process group.

Every op is the native method itself (no Python layer in the call path): see the type stubs
or ``help(switchyard.Buffer.ll_dispatch)``.
"""

from __future__ import annotations

import sys
from typing import Any

from . import _switchyard as _C
from ._bootstrap import make_communicator


def _default_device(torch_group: bool) -> int:
    if "torch" in sys.modules:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.current_device()
    return 0


class Buffer(_C.Buffer):
    """One rank's communication buffer. Creating it is collective over ``group``.

    ``group``: a ``torch.distributed`` ProcessGroup (None: the default group), a
    ``switchyard.Communicator``, or any object with ``allgather(bytes) -> list[bytes]``,
    ``barrier()``, ``rank`` and ``size``. ``config``: a ``BufferConfig``, or its fields as keyword
    arguments (``Buffer(group, max_tokens_per_rank=128, enable_low_latency=True)``).
    ``device``: the CUDA device (default: torch's current device, else 0).

    Destruction is collective too: call ``destroy()`` on every rank (or let every rank drop the
    buffer at the same point) before the group goes away.
    """

    def __init__(self, group: Any = None, config: _C.BufferConfig | None = None, *,
                 device: int | None = None, **config_fields: Any):
        if config is None:
            config = _C.BufferConfig(**config_fields)
        elif config_fields:
            raise TypeError("switchyard.Buffer: pass either config or its fields as keywords, not both")
        communicator, torch_group = make_communicator(group)
        if device is None:
            device = _default_device(torch_group)
        super().__init__(communicator, device, config)
        self.group = group
        self.communicator = communicator
        if torch_group or "torch" in sys.modules:
            self.framework = _C.Framework.TORCH

    def __enter__(self) -> "Buffer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.destroy()

    def __repr__(self) -> str:
        if self.destroyed:
            return "switchyard.Buffer(destroyed)"
        return (f"switchyard.Buffer(rank {self.rank} of {self.num_ranks}, device {self.device}, "
                f"{self.buffer_bytes} bytes)")


def buffer_size_hint(config: _C.BufferConfig | None = None, num_ranks: int = 1, num_nodes: int = 1,
                     **config_fields: Any) -> int:
    """Bytes of the symmetric buffer each rank allocates for ``config`` (or its fields as
    keywords) with ``num_ranks`` ranks on ``num_nodes`` nodes, before creating it."""
    if config is None:
        config = _C.BufferConfig(**config_fields)
    elif config_fields:
        raise TypeError("switchyard.buffer_size_hint: pass either config or its fields, not both")
    return _C.buffer_size_hint(config, num_ranks, num_nodes)


def record_event(stream: Any = None) -> _C.Event:
    """An Event recorded now on ``stream`` (default: torch's current stream when torch is
    loaded): pass it as ``after=`` to order an op after it."""
    framework = _C.Framework.TORCH if "torch" in sys.modules else _C.Framework.NONE
    return _C.Event.record(stream, framework)
