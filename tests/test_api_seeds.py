"""Per-prompt seeds through the Python API: a row samples alike alone or in any batch."""
import pytest

import dllm

PROMPTS = ["Copy: Ann Lee, Bo Kim", "Reverse: Cy Dunn, Di Ely, Ed Fox"]


@pytest.fixture(scope="module")
def lm():
    return dllm.load()


def test_generate_seeds_per_row_equal_single_runs(lm):
    opts = dict(gen_length=16, temperature=1.0)
    batch = lm.generate(PROMPTS + PROMPTS, seeds=[3, 4, 5, 6], **opts)
    singles = [lm.generate([p], seeds=[s], **opts) for p, s in zip(PROMPTS + PROMPTS, [3, 4, 5, 6])]
    assert batch.token_ids == [s.token_ids[0] for s in singles]
    # one seed per row is what separates two samples of the same prompt
    default = lm.generate(PROMPTS, **opts)
    assert default.token_ids == lm.generate(PROMPTS, seeds=[0, 0], **opts).token_ids


@pytest.mark.parametrize("seeds, message", [([1], "got 1 seeds for 2 prompts"), ([1, -2], "seed 1 is -2"),
                                            ([1, 2.5], "seed 1 is 2.5")])
def test_bad_seeds_are_refused(lm, seeds, message):
    with pytest.raises(ValueError, match=message):
        lm.generate(PROMPTS, seeds=seeds, gen_length=16)
