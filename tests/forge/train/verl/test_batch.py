"""Rows in veRL's layout (forge.train.verl.batch): prompt up to the first sampled token, response
after, left and right padding, positions restarting per row, ranks holding equal row counts."""

from __future__ import annotations

import torch

from forge.train.batching import Row
from forge.train.verl.batch import collate, shard, split_row

PAD = 0


def _row(tokens: list[int], sampled: list[int], adv: float = 1.0, weight: float = 0.5) -> Row:
    """``sampled``: indices of ``tokens`` that were sampled (never 0)."""
    mask = torch.tensor([i + 1 in sampled for i in range(len(tokens) - 1)])
    old = torch.where(mask, -torch.arange(1, len(tokens), dtype=torch.float32) / 10, 0.0)
    return Row(torch.tensor(tokens), mask, old, adv, 0, weight, temperature=0.7)


def test_a_row_splits_at_its_first_sampled_token_with_tool_tokens_masked_inside():
    row = _row([5, 6, 7, 8, 9, 10, 11], sampled=[3, 4, 6])  # 5 = a tool token between
    v = split_row(row, episode_weights=False)
    assert v.prompt.tolist() == [5, 6, 7]
    assert v.response.tolist() == [8, 9, 10, 11]
    assert v.mask.tolist() == [True, True, False, True]
    assert torch.allclose(v.old_logprobs, torch.tensor([-0.3, -0.4, 0.0, -0.6]))  # -(i)/10
    assert v.advantage.tolist() == [1.0, 1.0, 0.0, 1.0]
    weighted = split_row(row, episode_weights=True)
    assert weighted.advantage.tolist() == [0.5, 0.5, 0.0, 0.5]  # advantage x 1/(E*T_e)
    assert v.temperature == 0.7


def test_collate_pads_prompts_left_and_responses_right():
    a = split_row(_row([1, 2, 3, 4], sampled=[1, 3]), False)  # prompt [1], response [2, 3, 4]
    b = split_row(_row([7, 8, 9], sampled=[2]), False)  # prompt [7, 8], response [9]
    t = collate([a, b], PAD)
    assert t["prompts"].tolist() == [[0, 1], [7, 8]]
    assert t["responses"].tolist() == [[2, 3, 4], [9, 0, 0]]
    assert t["input_ids"].tolist() == [[0, 1, 2, 3, 4], [7, 8, 9, 0, 0]]
    assert t["attention_mask"].tolist() == [[0, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
    assert t["position_ids"].tolist() == [[0, 0, 1, 2, 3], [0, 1, 2, 2, 2]]
    assert t["response_mask"].tolist() == [[1, 0, 1], [1, 0, 0]]
    assert torch.allclose(t["temperature"], torch.tensor([0.7, 0.7]))


def test_shards_hold_equal_row_counts_in_whole_micro_batches():
    rows = [_row(list(range(1, 3 + i)), sampled=[1 + i]) for i in range(5)]
    batches, owned = shard(rows, ranks=2, micro_batch_size=2, pad_id=PAD, episode_weights=True)
    assert [len(b["input_ids"]) for b in batches] == [4, 4]  # 3 and 2 rows, padded to 4
    assert sorted(i for o in owned for i in o) == list(range(5))
    assert owned[0][0] == 4  # the longest row first
    for b, idx in zip(batches, owned, strict=True):
        assert int(b["response_mask"][len(idx) :].sum()) == 0  # padding rows train nothing
    for b, idx in zip(batches, owned, strict=True):  # each rank's rows, in its order
        for j, i in enumerate(idx):
            r = split_row(rows[i], False).response
            assert b["responses"][j][: len(r)].tolist() == r.tolist()


def test_fewer_rows_than_ranks_still_gives_every_rank_a_batch():
    batches, owned = shard([_row([1, 2, 3], [2])], 3, 4, PAD, True)
    assert [len(b["input_ids"]) for b in batches] == [4, 4, 4]
    assert owned == [[0], [], []]
