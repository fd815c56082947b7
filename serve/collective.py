"""Weights by collective broadcast: the trainer (rank 0) sends bucketed tensors to every Policy
replica's model workers through a process group made for the purpose.

The group is a torch.distributed backend built directly on a ``TCPStore`` that the trainer hosts
(``ProcessGroupNCCL`` on GPUs, ``ProcessGroupGloo`` on CPUs), never the default group, so it
lives beside whatever groups vLLM or the trainer already use. Tensors travel packed into flat
byte buckets of at most ``bucket_bytes``, in the order of a ``TensorMeta`` list that both sides
hold; the receiver unpacks them into Hugging Face-named tensors.

:class:`Broadcaster` is the trainer's side, :class:`Receiver` a replica's (in the Policy's
process for the torch engine, in each vLLM worker for the vllm engine). A message, made by
:class:`~serve.weight_sync.CollectiveWeightSync` and passed to every party, says where the group
meets (``address``, ``port``, ``world_size``, and ``group``: an id the broadcaster mints for
each new group, so a party joins a new group exactly when the id changes), the backend, the
tensors and each replica's base rank.
"""

from __future__ import annotations

import datetime
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

_DTYPES = {
    str(d): d for d in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64)
}


@dataclass(frozen=True)
class TensorMeta:
    name: str
    shape: tuple[int, ...]
    dtype: str  # str(torch.dtype), e.g. "torch.bfloat16"

    @property
    def nbytes(self) -> int:
        n = _DTYPES[self.dtype].itemsize
        for s in self.shape:
            n *= s
        return n


def metas_of(state_dict: dict[str, torch.Tensor]) -> list[TensorMeta]:
    out = []
    for name, t in state_dict.items():
        if str(t.dtype) not in _DTYPES:
            raise ValueError(f"weight {name}: dtype {t.dtype} cannot be broadcast")
        out.append(TensorMeta(name, tuple(t.shape), str(t.dtype)))
    return out


def plan_buckets(metas: list[TensorMeta], bucket_bytes: int) -> list[list[int]]:
    """Indices of ``metas`` per bucket, in order; a tensor larger than a bucket travels alone."""
    buckets: list[list[int]] = []
    size = 0
    for i, m in enumerate(metas):
        n = _aligned(m.nbytes)
        if not buckets or (buckets[-1] and size + n > bucket_bytes):
            buckets.append([])
            size = 0
        buckets[-1].append(i)
        size += n
    return buckets


def _aligned(n: int) -> int:
    return (n + 7) // 8 * 8  # every tensor starts 8-byte aligned in its bucket


def _bucket_bytes(metas: list[TensorMeta], bucket: list[int]) -> int:
    return sum(_aligned(metas[i].nbytes) for i in bucket)


def device_for(backend: str) -> torch.device:
    if backend == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class _Member:
    """One party of the group; joins a new one whenever the message's group id changes."""

    def __init__(self) -> None:
        self.group: Any = None
        self.group_id: str | None = None
        self._store: Any = None
        self._listen_fd: int | None = None  # rank 0: the socket its store will serve on

    def join(self, message: dict[str, Any], rank: int) -> Any:
        if self.group_id == message["group"]:
            return self.group
        import torch.distributed as dist

        timeout = datetime.timedelta(seconds=message["timeout_s"])
        world = message["world_size"]
        self.group = self._store = None  # drop the old group first
        self._store = dist.TCPStore(
            message["address"],
            message["port"],
            world,
            is_master=rank == 0,
            timeout=timeout,
            wait_for_workers=False,
            **({"master_listen_fd": self._listen_fd} if rank == 0 else {}),
        )
        self._listen_fd = None  # the store owns it now
        if message["backend"] == "nccl":
            self.group = dist.ProcessGroupNCCL(self._store, rank, world)
        else:
            self.group = dist.ProcessGroupGloo(self._store, rank, world, timeout)
        self.group_id = message["group"]
        return self.group


class Broadcaster(_Member):
    """The trainer's side: rank 0 of every group."""

    def open(self, address: str) -> dict[str, Any]:
        """Listen on ``address`` (this node's, loopback on a one-node cluster, never all
        interfaces) for the next group's store; returns where it meets and its new id."""
        sock = socket.create_server((address, 0), backlog=128)
        port = int(sock.getsockname()[1])
        if self._listen_fd is not None:  # opened before, never joined
            socket.socket(fileno=self._listen_fd).close()
        self._listen_fd = sock.detach()
        return {"address": address, "port": port, "group": uuid.uuid4().hex}

    def send(self, message: dict[str, Any], state_dict: dict[str, torch.Tensor]) -> int:
        """Broadcast ``state_dict`` (named as in ``message["tensors"]``); returns bytes sent."""
        metas = [TensorMeta(*m) for m in message["tensors"]]
        return self.send_stream(message, ((m.name, state_dict[m.name]) for m in metas))

    def send_stream(
        self, message: dict[str, Any], tensors: Iterator[tuple[str, torch.Tensor]]
    ) -> int:
        """Broadcast tensors as they come (in the order of ``message["tensors"]``), each copied
        into its bucket and let go: a source that makes them one at a time (gathered from
        shards) never holds more than one bucket. Returns the bytes sent."""
        group = self.join(message, 0)
        metas = [TensorMeta(*m) for m in message["tensors"]]
        device = device_for(message["backend"])
        sent = 0
        for bucket in plan_buckets(metas, message["bucket_bytes"]):
            flat = torch.zeros(_bucket_bytes(metas, bucket), dtype=torch.uint8, device=device)
            offset = 0
            for i in bucket:
                m = metas[i]
                name, tensor = next(tensors)
                if name != m.name:
                    raise ValueError(f"weights out of order: got {name}, expected {m.name}")
                t = tensor.detach().contiguous().view(-1).view(torch.uint8)
                flat[offset : offset + m.nbytes].copy_(t)
                offset += _aligned(m.nbytes)
            group.broadcast(flat, 0).wait()
            sent += flat.numel()
        return sent


class Receiver(_Member):
    """A replica worker's side."""

    def receive(self, message: dict[str, Any], rank: int) -> dict[str, torch.Tensor]:
        group = self.join(message, rank)
        metas = [TensorMeta(*m) for m in message["tensors"]]
        device = device_for(message["backend"])
        out: dict[str, torch.Tensor] = {}
        for bucket in plan_buckets(metas, message["bucket_bytes"]):
            flat = torch.empty(_bucket_bytes(metas, bucket), dtype=torch.uint8, device=device)
            group.broadcast(flat, 0).wait()
            offset = 0
            for i in bucket:
                m = metas[i]
                raw = flat[offset : offset + m.nbytes]
                out[m.name] = raw.view(_DTYPES[m.dtype]).view(m.shape)
                offset += _aligned(m.nbytes)
        return out
