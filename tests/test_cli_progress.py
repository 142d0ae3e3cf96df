"""``dllm generate``'s feedback: a bar of answer tokens committed round by round (the rows
``generate_ids`` gives), and the resolved configuration once under -v."""
from __future__ import annotations

import io

import pytest
from tqdm import tqdm

import dllm
from dllm.api.request import OutputRequest
from dllm.cli import main
from dllm.cli.progress import generate_batch


@pytest.fixture(scope="module")
def lm():
    return dllm.load()


class Recording(tqdm):
    """A bar that is shown (to a string) and remembers its count after each update."""

    def __init__(self, total: int) -> None:
        super().__init__(total=total, file=io.StringIO(), mininterval=0)
        self.counts: list[int] = []

    def update(self, n=1):
        super().update(n)
        self.counts.append(self.n)


@pytest.mark.parametrize("n, max_tokens", [(1, None), (2, 10)])
def test_bar_counts_committed_tokens_and_rows_are_generates(lm, n, max_tokens):
    ids = [lm.encode("Copy: Ann Lee, Bo Kim"), lm.encode("Reverse: Cy Dunn")]
    config = dllm.GenerationConfig(gen_length=16, block_length=8, temperature=1.0, seed=5)
    request = OutputRequest.parse(max_tokens=max_tokens, n=n)
    per_row = max_tokens or 16
    bar = Recording(total=2 * n * per_row)
    out = generate_batch(lm, ids, config, request, bar)
    expected = lm.generate_ids(ids, config, max_tokens=max_tokens, n=n)
    assert (out.texts, out.token_ids, out.finish_reasons) == (expected.texts, expected.token_ids,
                                                              expected.finish_reasons)
    assert bar.counts[-1] == 2 * n * per_row  # every row's answer, once
    assert len(set(bar.counts)) > 2 and bar.counts == sorted(bar.counts)  # it moved step by step



def test_rows_that_stop_early_count_as_done(lm):
    ids = [lm.encode("Copy: Ann Lee, Bo Kim"), lm.encode("Reverse: Cy Dunn")]
    config = dllm.GenerationConfig(gen_length=32, block_length=8)
    stop = lm.generate_ids(ids, config).texts[0][:3]  # row 0 stops in its first block
    bar = Recording(total=2 * 32)
    out = generate_batch(lm, ids, config, OutputRequest.parse(stop=[stop]), bar)
    assert out.finish_reasons[0] == "stop"
    assert bar.counts[-2] < 2 * 32 == bar.counts[-1]  # masks left in the stopped row, counted at the end

def test_verbose_prints_the_resolved_configuration_once(capsys):
    assert main(["-v", "generate", "hi", "--max-tokens", "12", "--block-length", "8", "--cache", "dual"]) == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("dllm: debug: DiffusionLM(")]
    assert len(lines) == 1
    for part in ("device='cpu'", "dtype='float32'", "gen_length=16", "block_length=8", "steps=16", "cache=dual"):
        assert part in lines[0]
