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
    port = sender.open("127.0.0.1")
    message = {
        "address": "127.0.0.1",
        "port": port,
        "epoch": 1,
        "world_size": 3,
        "backend": "gloo",
        "bucket_bytes": 256,  # several buckets
        "timeout_s": 60,
        "tensors": [(m.name, m.shape, m.dtype) for m in metas_of(state)],
    }
    got: dict[int, dict[str, torch.Tensor]] = {}

    def receive(rank: int) -> None:
        got[rank] = Receiver().receive(message, rank)

    threads = [threading.Thread(target=receive, args=(r,)) for r in (1, 2)]
    for t in threads:
        t.start()
    sent = sender.send(message, state)
    for t in threads:
        t.join(60)
    assert sent >= sum(t.numel() * t.element_size() for t in state.values())
    for rank in (1, 2):
        assert list(got[rank]) == list(state)
        for name, t in state.items():
            assert got[rank][name].dtype == t.dtype and got[rank][name].shape == t.shape
            assert torch.equal(got[rank][name], t), name
