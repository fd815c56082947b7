"""Image tokens: pad expansion at the Policy, the reverse check on recorded ids."""

from __future__ import annotations

import pytest

from serve.engines.base import ImageInputError
from serve.vision import check_image_pads, expand_image_pads, pad_runs

PAD = 9


def test_each_pad_expands_to_its_images_count() -> None:
    ids = [1, 8, PAD, 7, 2, 8, PAD, 7]
    assert expand_image_pads(ids, [3, 2], PAD) == [1, 8, PAD, PAD, PAD, 7, 2, 8, PAD, PAD, 7]


@pytest.mark.parametrize(("ids", "counts"), [([1, PAD, PAD], [4]), ([1, 2], [4]), ([PAD], [])])
def test_pads_and_images_must_agree(ids: list[int], counts: list[int]) -> None:
    """A prompt whose text holds the pad token (or lost one) is refused, not misaligned."""
    with pytest.raises(ImageInputError, match="image placeholders"):
        expand_image_pads(ids, counts, PAD)


def test_pad_runs_and_the_recorded_ids_check() -> None:
    ids = [1, PAD, PAD, PAD, 2, PAD, PAD, 3]
    assert pad_runs(ids, PAD) == [3, 2]
    check_image_pads(ids, [3, 2], PAD)
    for wrong in ([2, 3], [3], [3, 2, 1], [5]):
        with pytest.raises(ValueError, match="do not match"):
            check_image_pads(ids, wrong, PAD)
    check_image_pads([1, 2], [], PAD)
