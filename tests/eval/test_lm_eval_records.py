"""The lm-eval model's records: a request's seconds are its share of its batch, and every setting
that changes an answer (Monte-Carlo draws, the greedy check) changes the fingerprint, so a rerun
with it computes anew instead of answering from another setting's records."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("lm_eval")
from lm_eval.api.instance import Instance  # noqa: E402

from dllm.eval.lm_eval import DllmLM  # noqa: E402


def _lm(path, **args) -> DllmLM:
    return DllmLM(pretrained=str(path), device="cpu", **args)


def test_a_batch_s_seconds_are_shared_by_its_requests(tiny_dirs, tmp_path, monkeypatch):
    """Three requests in one batch whose rows each report 6 s: 2 s per request, the batch's 6 s
    in all (the speed file's tokens/s is then the batch's throughput, not three times it)."""
    lm = _lm(tiny_dirs["llada"], batch_size=3, save_dir=str(tmp_path), block_length=8)
    generate = lm.dllm.generate_ids

    def six_seconds_a_row(*args, **kwargs):
        out = generate(*args, **kwargs)
        for stats in out.stats:
            stats["seconds"] = 6.0
        return out

    monkeypatch.setattr(lm.dllm, "generate_ids", six_seconds_a_row)
    requests = [Instance("generate_until", {}, (p, {"max_gen_toks": 8}), 0, ("t", i, 1))
                for i, p in enumerate(["a", "x y z", "hello there"])]
    lm.generate_until(requests, disable_tqdm=True)
    records = [json.loads(line) for line in (tmp_path / "dllm_requests.rank0.jsonl").read_text().splitlines()]
    assert [r["seconds"] for r in records] == [2.0, 2.0, 2.0]
    (row,) = json.loads((tmp_path / "dllm_speed.json").read_text())["rows"]
    assert row["tokens_per_s"] == pytest.approx(sum(r["tokens"] for r in records) / 6.0)


@pytest.mark.parametrize("change", [{"mc_num": 8}, {"greedy_check": False}])
def test_a_setting_that_changes_likelihoods_is_not_answered_from_the_records(tiny_dirs, tmp_path, change):
    request = Instance("loglikelihood", {}, ("hello", " there"), 0, ("t", 0, 1))
    base = {"save_dir": str(tmp_path), "mc_num": 4, "batch_size": 4}
    _lm(tiny_dirs["llada"], **base).loglikelihood([request], disable_tqdm=True)
    same = _lm(tiny_dirs["llada"], **base)
    assert same.records.get("loglikelihood", request.args) is not None  # the arrangement: a rerun resumes
    other = _lm(tiny_dirs["llada"], **{**base, **change})
    assert other.records.get("loglikelihood", request.args) is None


def test_the_speed_summary_means_per_request_and_ratios_of_sums():
    """Per (task, request type): NFE, tokens and token-forwards are means per request; TPF and
    tokens/s are ratios of sums (a request of many forwards weighs more), not means of ratios."""
    from dllm.eval.records import speed_summary

    records = [{"task": "t", "kind": "generate_until", "nfe": 2, "tokens": 8, "token_forwards": 40, "seconds": 1.0},
               {"task": "t", "kind": "generate_until", "nfe": 6, "tokens": 8, "token_forwards": 80, "seconds": 3.0},
               {"task": "t", "kind": "loglikelihood", "nfe": 5, "tokens": 0, "token_forwards": 50, "seconds": 0.5}]
    gen, ll = speed_summary(records)["rows"]
    assert (gen["requests"], gen["nfe"], gen["tokens"], gen["token_forwards"]) == (2, 4, 8, 60)
    assert (gen["tpf"], gen["tokens_per_s"], gen["seconds"]) == (16 / 8, 16 / 4.0, 4.0)
    assert (ll["request_type"], ll["nfe"], ll["tpf"], ll["tokens_per_s"]) == ("loglikelihood", 5, None, None)


def test_the_speed_file_sums_this_run_s_requests_only(tiny_dirs, tmp_path):
    """A second run into the same folder, of the same settings but other documents, reports its own
    two requests: the earlier run's record stays in the folder (for resuming) but not in the sum."""
    requests = [Instance("generate_until", {}, (p, {"max_gen_toks": 8}), 0, ("t", i, 1))
                for i, p in enumerate(["a", "x y z", "hello there"])]
    args = {"save_dir": str(tmp_path), "block_length": 8}
    _lm(tiny_dirs["llada"], **args).generate_until(requests[:1], disable_tqdm=True)
    _lm(tiny_dirs["llada"], **args).generate_until(requests[1:], disable_tqdm=True)
    assert len((tmp_path / "dllm_requests.rank0.jsonl").read_text().splitlines()) == 3
    (row,) = json.loads((tmp_path / "dllm_speed.json").read_text())["rows"]
    assert row["requests"] == 2


def test_a_rank_that_does_not_write_reads_the_records_and_writes_nothing(tmp_path):
    """A tensor-parallel rank other than its copy's first skips what is done but leaves the files
    to that first rank (two ranks appending the same answers would double every record)."""
    from dllm.eval.records import RequestRecords

    RequestRecords(tmp_path, 0, "fp").add("generate_until", ["a"], {"result": "x", "nfe": 1, "seconds": 1.0})
    reader = RequestRecords(tmp_path, 1, "fp", writes=False)
    assert reader.get("generate_until", ["a"])["result"] == "x"
    reader.add("generate_until", ["b"], {"result": "y", "nfe": 1, "seconds": 1.0})
    assert reader.get("generate_until", ["b"])["result"] == "y"  # known to this process
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dllm_requests.rank0.jsonl"]
    assert reader.write_speed() is None and not (tmp_path / "dllm_speed.json").exists()


def test_a_record_line_cut_short_is_skipped_and_the_others_resume(tmp_path):
    """An interrupted run can leave half a JSON line at the end of its file: the finished
    records before it still answer a rerun."""
    from dllm.eval.records import RequestRecords

    RequestRecords(tmp_path, 0, "fp").add("generate_until", ["a"], {"result": "x", "nfe": 1, "seconds": 1.0})
    with (tmp_path / "dllm_requests.rank0.jsonl").open("a") as f:
        f.write('{"key": "0123", "fingerprint": "fp", "res')
    assert RequestRecords(tmp_path, 0, "fp").get("generate_until", ["a"])["result"] == "x"
