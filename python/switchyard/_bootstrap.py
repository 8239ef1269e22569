"""How a Buffer finds its peers: a Communicator from a torch.distributed group or any object
with ``allgather(bytes) -> list[bytes]`` and ``barrier()``.

The exchange goes through the group the caller already has (no extra rendezvous). The C++
library calls these methods only while creating, resetting and destroying a buffer, never on the
data path.
"""

from __future__ import annotations

import sys
from typing import Any

from . import _switchyard as _C


def _torch_distributed():
    if "torch" not in sys.modules:
        return None
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch without distributed
        return None
    return dist if dist.is_available() else None


def is_torch_process_group(group: Any) -> bool:
    dist = _torch_distributed()
    return dist is not None and isinstance(group, dist.ProcessGroup)


class TorchGroupExchange:
    """allgather/barrier over a torch.distributed process group (gloo, NCCL, ...).

    Bytes travel with ``all_gather_object`` on the group's own backend; ``barrier`` is the group's
    barrier. Collectives are bounded by the group's timeout.
    """

    def __init__(self, group: Any):
        dist = _torch_distributed()
        if dist is None or not dist.is_initialized():
            raise _C.InvalidArgument(
                "switchyard: torch.distributed is not initialized; call init_process_group first"
            )
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self.backend = str(dist.get_backend(group))

    def allgather(self, data: bytes) -> list[bytes]:
        import torch.distributed as dist

        gathered: list[Any] = [None] * self.size
        dist.all_gather_object(gathered, bytes(data), group=self.group)
        return gathered

    def barrier(self) -> None:
        import torch.distributed as dist

        dist.barrier(group=self.group)


def _rank_and_size(group: Any) -> tuple[int, int]:
    def read(*names: str) -> int | None:
        for name in names:
            value = getattr(group, name, None)
            if value is None:
                continue
            return int(value() if callable(value) else value)
        return None

    rank = read("rank", "get_rank")
    size = read("size", "world_size", "get_world_size")
    if rank is None or size is None:
        raise _C.InvalidArgument(
            "switchyard: a group object needs rank and size (attributes or methods) besides "
            "allgather(bytes) -> list[bytes] and barrier()"
        )
    return rank, size


def make_communicator(group: Any) -> tuple[_C.Communicator, bool]:
    """(communicator, whether the group is torch's) for a Buffer on ``group``.

    ``group`` may be a ``switchyard.Communicator``, a ``torch.distributed.ProcessGroup``, None
    (torch's default group), or any object with ``allgather(bytes) -> list[bytes]``,
    ``barrier()``, ``rank`` and ``size``.
    """
    if isinstance(group, _C.Communicator):
        return group, False
    if group is None:
        dist = _torch_distributed()
        if dist is None or not dist.is_initialized():
            raise _C.InvalidArgument(
                "switchyard: Buffer(group=None) uses torch.distributed's default group, which is not "
                "initialized; pass a process group or a communicator"
            )
        group = dist.group.WORLD
    if is_torch_process_group(group):
        exchange = TorchGroupExchange(group)
        name = f"torch.distributed {exchange.backend}"
        return _C.python_communicator(exchange, exchange.rank, exchange.size, name), True
    if not (hasattr(group, "allgather") and hasattr(group, "barrier")):
        raise _C.InvalidArgument(
            "switchyard: group must be a torch.distributed ProcessGroup, a switchyard.Communicator "
            f"or an object with allgather(bytes) -> list[bytes] and barrier(); got {type(group).__name__}"
        )
    rank, size = _rank_and_size(group)
    return _C.python_communicator(group, rank, size, type(group).__name__), False
