"""serve.collective: bucketing, and a real gloo broadcast from a Broadcaster to Receivers."""

from __future__ import annotations

import threading

import pytest
import torch

from serve.collective import Broadcaster, Receiver, TensorMeta, metas_of, plan_buckets


def test_buckets_keep_order_and_size_and_a_large_tensor_travels_alone():
    metas = [
        TensorMeta("a", (100,), "torch.float32"),  # 400 bytes
        TensorMeta("b", (100,), "torch.float32"),
        TensorMeta("big", (1000,), "torch.float32"),  # larger than a bucket
        TensorMeta("c", (3,), "torch.bfloat16"),  # 6 bytes, padded to 8
        TensorMeta("d", (1,), "torch.float32"),
    ]
    assert plan_buckets(metas, 1000) == [[0, 1], [2], [3, 4]]
    assert plan_buckets(metas, 800) == [[0, 1], [2], [3, 4]]
    assert plan_buckets(metas, 799) == [[0], [1], [2], [3, 4]]
    assert plan_buckets(metas, 10**9) == [[0, 1, 2, 3, 4]]
    assert plan_buckets([], 100) == []


def test_a_dtype_that_cannot_travel_is_named():
    with pytest.raises(ValueError, match=r"weight mask: dtype torch.bool"):
        metas_of({"w": torch.zeros(2), "mask": torch.zeros(2, dtype=torch.bool)})


def _message(
    sender: Broadcaster, state: dict, world: int, backend: str = "gloo", bucket_bytes: int = 256
) -> dict:
    return {
        **sender.open("127.0.0.1"),
        "world_size": world,
        "backend": backend,
        "bucket_bytes": bucket_bytes,  # 256: several buckets
        "timeout_s": 60,
        "tensors": [(m.name, m.shape, m.dtype) for m in metas_of(state)],
    }


def _broadcast(
    sender: Broadcaster, receivers: dict[int, Receiver], message: dict, state: dict
) -> tuple[int, dict[int, dict[str, torch.Tensor]]]:
    got: dict[int, dict[str, torch.Tensor]] = {}

    def receive(rank: int) -> None:
        got[rank] = receivers[rank].receive(message, rank)

    threads = [threading.Thread(target=receive, args=(r,)) for r in receivers]
    for t in threads:
        t.start()
    sent = sender.send(message, state)
    for t in threads:
        t.join(60)
    return sent, got


def _assert_same(got: dict[str, torch.Tensor], state: dict[str, torch.Tensor]) -> None:
    assert list(got) == list(state)
    for name, t in state.items():
        assert got[name].dtype == t.dtype and got[name].shape == t.shape
        assert torch.equal(got[name], t), name


def test_broadcast_reaches_every_receiver_bit_for_bit_across_buckets_and_dtypes():
    torch.manual_seed(0)
    state = {  # odd sizes and mixed dtypes: every tensor starts aligned in its bucket
        "embed": torch.randn(7, 5),
        "norm": torch.randn(3).to(torch.bfloat16),
        "scale": torch.randn(()),
        "proj": torch.randn(33, 17).to(torch.float16),
        "steps": torch.arange(5),
    }
    sender = Broadcaster()
    message = _message(sender, state, world=3)
    sent, got = _broadcast(sender, {1: Receiver(), 2: Receiver()}, message, state)
    assert sent >= sum(t.numel() * t.element_size() for t in state.values())
    for rank in (1, 2):
        _assert_same(got[rank], state)


def test_a_new_group_is_joined_afresh_and_the_same_group_is_reused():
    """One trainer feeding two sets of replicas in turn (two Policies, or a replica set that
    changed): each group has its own id, and a party keeps its group while the id holds."""
    state = {"w": torch.randn(40, 3)}
    sender, first, second = Broadcaster(), Receiver(), Receiver()
    one = _message(sender, state, world=2)
    _broadcast(sender, {1: first}, one, state)
    group = first.group
    two = _message(sender, state, world=3)  # a new group with both receivers
    assert two["group"] != one["group"]
    state = {"w": torch.randn(40, 3)}
    _, got = _broadcast(sender, {1: first, 2: second}, two, state)
    assert first.group is not group
    _assert_same(got[1], state)
    _assert_same(got[2], state)
    state = {"w": torch.randn(40, 3)}
    kept = first.group
    _, got = _broadcast(sender, {1: first, 2: second}, two, state)  # same group, next weights
    assert first.group is kept
    _assert_same(got[2], state)


def _receive_on_gpu(message: dict, queue) -> None:  # a spawned process: rank 1 on GPU 1
    torch.cuda.set_device(1)
    got = Receiver().receive(message, 1)
    queue.put({k: v.cpu() for k, v in got.items()})


@pytest.mark.gpu
def test_nccl_broadcast_between_two_gpus():
    """NCCL needs each rank on its own GPU (one device cannot hold two ranks): GPU 0 sends in
    this process, GPU 1 receives in a spawned one."""
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        pytest.skip("NCCL between two ranks needs two GPUs")
    import torch.multiprocessing as mp

    torch.cuda.set_device(0)
    state = {
        "w": torch.randn(1000, 300, device="cuda"),
        "b": torch.randn(7, device="cuda").to(torch.bfloat16),
    }
    sender = Broadcaster()
    message = _message(sender, state, world=2, backend="nccl", bucket_bytes=2**20)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_receive_on_gpu, args=(message, queue))
    proc.start()
    sender.send(message, state)
    got = queue.get(timeout=120)
    proc.join(60)
    _assert_same(got, {k: v.cpu() for k, v in state.items()})
