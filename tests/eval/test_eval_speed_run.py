"""``dllm_speed.json`` describes the run whose scores lm-eval writes beside it: a rerun into the
same folder with fewer requests (a smaller --limit, another task) sums only its own requests,
those answered from the records included, not every record the folder holds."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("lm_eval")
from lm_eval.api.instance import Instance  # noqa: E402

from dllm.eval.lm_eval import DllmLM  # noqa: E402


def _gen(context: str, doc_id: int, task: str) -> Instance:
    return Instance("generate_until", {}, (context, {"max_gen_toks": 8}), 0, (task, doc_id, 1))


def test_the_speed_file_sums_the_requests_of_this_run(tiny_dirs, tmp_path):
    args = {"pretrained": str(tiny_dirs["llada"]), "device": "cpu", "save_dir": str(tmp_path)}
    first = [_gen(p, i, "big") for i, p in enumerate(["a", "b c", "d e f"])]
    DllmLM(**args).generate_until(first, disable_tqdm=True)
    rerun = DllmLM(**args)
    rerun.generate_until(first[:1] + [_gen("new one", 0, "other")], disable_tqdm=True)
    rows = {r["task"]: r for r in json.loads((tmp_path / "dllm_speed.json").read_text())["rows"]}
    assert {task: r["requests"] for task, r in rows.items()} == {"big": 1, "other": 1}
