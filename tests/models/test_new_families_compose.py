"""The new families take everything the old ones do, unchanged: rules, strategies, stoppers and
caches at batch > 1 with ragged prompts (each row its single-run tokens), ``stream`` (generate's
tokens), and the OpenAI server (generate's answers through the real client)."""
from __future__ import annotations

import openai
import pytest

import dllm
from dllm.models.tiny import write_tiny_checkpoint
from dllm.serve.app import create_app
from dllm.serve.protocol import SchedulerLimits
from dllm.serve.requests import ServerDefaults
from tests.serve.serve_helpers import RecordingScheduler, running_server

FAMILIES = ("sdar", "llada2_moe", "llada_moe")
PROMPTS = ["the quick brown fox", "a masked diffusion language model decodes many tokens per forward", "hi"]
POLICIES = {
    "low_confidence": dict(),
    "threshold_dual": dict(policy="threshold", policy_args={"tau": 0.09}, cache="dual"),
    "eb_prefix": dict(policy="eb_sampler", policy_args={"gamma": 0.5}, cache="prefix"),
    "freedave": dict(strategy="freedave", strategy_args={"num_drafts": 3}),
    "lopa_dual": dict(policy="threshold", policy_args={"tau": 0.09}, strategy="lopa",
                      strategy_args={"branches": 2}, cache="dual"),
    "sched": dict(policy="threshold", policy_args={"tau": 0.09}, stopper="sched"),
    "eotp_sampled": dict(policy="threshold", policy_args={"tau": 0.09}, stopper="eotp", temperature=0.8),
}


@pytest.fixture(scope="module", params=FAMILIES)
def lm(request, tmp_path_factory):
    path = write_tiny_checkpoint(tmp_path_factory.mktemp(request.param), request.param, seed=11)
    return dllm.load(path, device="cpu", dtype="float32")


def _options(lm, name):
    block = 32 if lm.model.config.block_size == 32 else 8
    return dict(gen_length=block * 2, block_length=block, chat=False, **POLICIES[name])


@pytest.mark.parametrize("name", POLICIES)
def test_ragged_batch_equals_single_runs(lm, name):
    options = _options(lm, name)
    batch = lm.generate(PROMPTS, seeds=[1, 2, 3], **options)
    for row, prompt in enumerate(PROMPTS):
        single = lm.generate(prompt, seeds=[row + 1], **options)
        assert batch.token_ids[row] == single.token_ids[0]
        assert batch.stats[row]["nfe"] == single.stats[0]["nfe"]


def test_stream_gives_generates_tokens(lm):
    options = _options(lm, "threshold_dual")
    out = lm.generate(PROMPTS[1], seeds=[5], **options)
    last = list(lm.stream(PROMPTS[1], seed=5, **options))[-1]
    assert last.finished and last.final_ids == out.token_ids[0] and last.final_text == out.texts[0]


def test_server_answers_equal_generate(lm):
    block = 32 if lm.model.config.block_size == 32 else 8
    scheduler = RecordingScheduler(lm, SchedulerLimits(max_batch=4, max_queue=16))
    defaults = ServerDefaults(options={"block_length": block}, max_tokens=block)
    try:
        with running_server(create_app(lm, scheduler, defaults=defaults, served_name="t")) as url:
            client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)
            for prompt in PROMPTS:
                got = client.completions.create(model="t", prompt=prompt, max_tokens=block, seed=3)
                want = lm.generate(prompt, chat=False, seeds=[3], max_tokens=block, block_length=block)
                assert got.choices[0].text == want.texts[0]
    finally:
        scheduler.close()
