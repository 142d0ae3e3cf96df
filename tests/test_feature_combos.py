"""Request features beside the policies, caches, strategies and stoppers no other test pairs them
with, on the bundled models: in a ragged batch of three prompts each row gets the ids, text, finish
reason, logprobs and tool calls it gets alone (seeded alike), and ``stream`` of the first prompt
ends as its row. The other tests pair these features with the default decode (tests/test_generate_api.py,
tests/test_api_logprobs.py, tests/serve/test_tool_calls_api.py) or pair the configs with a bare
decode (tests/samplers/test_composition.py); a feature that kept one row's state in another's, or
read a shared window where a row's own was due, shows only in such pairs."""
from __future__ import annotations

import math

import pytest

import dllm

PROMPTS = ["Copy: Ann Lee, Bo Kim", "Reverse: Cy Dunn, Di Ely, Ed Fox, Al Bo", "Sort: Zed"]
SEEDS = [3, 11, 7]
TOL = 1e-4  # a logprob moves by float rounding with the batch's padding; the tokens do not
CITY = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"],
        "additionalProperties": False}
DAYS = {"type": "object", "properties": {"days": {"type": "integer", "minimum": 1, "maximum": 9}},
        "required": ["days"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "weather", "parameters": CITY}},
         {"type": "function", "function": {"name": "forecast", "parameters": DAYS}}]
NAMES = {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3}
THRESHOLD = dict(policy="threshold", policy_args={"tau": 0.5})
# margins 12 -> 4: on the bundled LLaDA the three rows stop at different forwards, two of them early
LOPA_SCHED = dict(strategy="lopa", strategy_args={"branches": 2}, stopper="sched",
                  stopper_args={"tau_high": 12.0, "tau_low": 4.0})

# id: (bundled model, config, request features); "STOPS" is replaced by stop strings taken from the
# middle of the model's own answers, so that rows stop at different places
CASES = {
    "llada-dual-logprobs": ("llada", dict(THRESHOLD, cache="dual"), dict(logprobs=2)),
    "llada-sub_block-logprobs-stop": ("llada", dict(policy="factor", policy_args={"factor": 1.0}, cache="dual",
                                                    sub_block_length=4), dict(logprobs=1, stop="STOPS")),
    "llada-eotp-logprobs-T": ("llada", dict(THRESHOLD, stopper="eotp", temperature=0.8), dict(logprobs=2)),
    "llada-editing-logprobs": ("llada", dict(THRESHOLD, edit_threshold=0.5), dict(logprobs=1, echo=True)),
    "dream-prefix-logprobs": ("dream", dict(THRESHOLD, cache="prefix"), dict(logprobs=2)),
    "bd-dual-logprobs-regex": ("bd", dict(THRESHOLD, cache="dual"), dict(logprobs=1, regex=r"[A-Z][a-z]+( [A-Z][a-z]+)*")),
    "moe-eb_sampler-logprobs": ("moe", dict(policy="eb_sampler", policy_args={"gamma": 0.1}), dict(logprobs=1)),
    "llada-adaptive-stop": ("llada", dict(THRESHOLD, cache="adaptive"), dict(stop="STOPS")),
    "llada-lopa-stop": ("llada", dict(strategy="lopa", strategy_args={"branches": 2}), dict(stop="STOPS")),
    "llada-lopa-sched-stop": ("llada", dict(LOPA_SCHED), dict(stop="STOPS")),
    "dream-freedave-stop": ("dream", dict(strategy="freedave", strategy_args={"num_drafts": 3}), dict(stop="STOPS")),
    "bd-sched-stop": ("bd", dict(stopper="sched", stopper_args={"tau_high": 3.0, "tau_low": 0.5}), dict(stop="STOPS")),
    "d2f-pipelined-stop": ("d2f", dict(block_add_threshold=0.1, policy="low_confidence", policy_args={"tau": 0.9}),
                           dict(stop="STOPS")),
    "gemma-uniform-stop": ("gemma", dict(), dict(stop="STOPS")),
    "dream-prophet-n2": ("dream", dict(policy="factor", stopper="prophet", stopper_args={"thresholds": [4.0, 2.0, 0.5]}),
                         dict(n=2, temperature=0.8)),
    "llada-prefix-n2-json": ("llada", dict(THRESHOLD, cache="prefix"), dict(n=2, temperature=0.8, json_schema=NAMES)),
    "llada-dual-tools_required": ("llada", dict(THRESHOLD, cache="dual"), dict(tools=TOOLS, tool_choice="required")),
    "dream-lopa-tools_named-T": ("dream", dict(strategy="lopa", strategy_args={"branches": 2}, temperature=0.8),
                                 dict(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "forecast"}})),
}
_LOADED: dict[str, dllm.DiffusionLM] = {}


def _model(name: str):
    if name not in _LOADED:
        _LOADED[name] = dllm.load(f"dllm-waitingline-{name}", dtype="float32")
    return _LOADED[name]


def _stops(lm, options: dict) -> list[str]:
    """Two characters from the middle of each prompt's plain answer (the first stops that row)."""
    plain = lm.generate(PROMPTS, seeds=SEEDS, **options)
    return sorted({text[len(text) // 2 : len(text) // 2 + 2] for text in plain.texts if len(text) >= 4})


def _rows(out) -> list[tuple]:
    calls = [None] * len(out.texts) if out.tool_calls is None else [[(c.name, c.arguments) for c in row]
                                                                   for row in out.tool_calls]
    logprobs = [None] * len(out.texts) if out.logprobs is None else out.logprobs
    return list(zip(out.token_ids, out.texts, out.finish_reasons, calls, logprobs))


def _same_logprobs(got, expected) -> None:
    if expected is None:
        assert got is None
        return
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert not math.isnan(a.logprob) and a.logprob == pytest.approx(b.logprob, abs=TOL)
        assert [v for _, v in a.top] == pytest.approx([v for _, v in b.top], abs=TOL)


@pytest.fixture(scope="module", autouse=True)
def _unload():
    yield
    _LOADED.clear()


@pytest.mark.parametrize("case", CASES)
def test_ragged_batch_rows_are_their_prompts_alone(case):
    name, config, features = CASES[case]
    lm = _model(name)
    options = dict(config, max_tokens=40 if "tools" in features else 16)
    if name != "gemma":  # the uniform-state model's block is its canvas
        options["block_length"] = 8
    if features.get("stop") == "STOPS":
        features = dict(features, stop=_stops(lm, options))
    batch = lm.generate(PROMPTS, seeds=SEEDS, **options, **features)
    n = features.get("n", 1)
    rows = _rows(batch)
    assert len(rows) == n * len(PROMPTS)
    for i, prompt in enumerate(PROMPTS):
        alone = _rows(lm.generate(prompt, seeds=[SEEDS[i]], **options, **features))
        for k in range(n):
            got, expected = rows[i * n + k], alone[k]
            assert got[:4] == expected[:4], f"row {i}, sample {k}"
            _same_logprobs(got[4], expected[4])
    reasons = batch.finish_reasons
    if "stop" in features:  # the stops took effect: some row ended at one
        assert "stop" in reasons
    if "tools" in features:
        assert all(calls for calls in batch.tool_calls)
    if n == 1 and not features.get("echo"):
        last = list(lm.stream(PROMPTS[0], seed=SEEDS[0], **options, **features))[-1]
        assert (last.final_ids, last.final_text, last.finish_reason) == rows[0][:3]
        if "tools" in features:
            assert [(c.name, c.arguments) for c in last.tool_calls] == rows[0][3]
        _same_logprobs(last.logprobs, rows[0][4])


def test_lopa_rows_exit_by_sched_at_their_own_forward():
    """LoPA's branches with SchED's exit: each row stops at the forward it stops at alone, never
    later than LoPA without the exit and some row earlier, and the rows of one batch stop at
    different forwards (one row's exit is not the batch's)."""
    lm = _model("llada")
    options = dict(max_tokens=16, block_length=8)
    plain = [s["nfe"] for s in lm.generate(PROMPTS, seeds=SEEDS, **options, **{k: v for k, v in LOPA_SCHED.items()
                                                                             if not k.startswith("stopper")}).stats]
    batch = [s["nfe"] for s in lm.generate(PROMPTS, seeds=SEEDS, **options, **LOPA_SCHED).stats]
    alone = [lm.generate(p, seeds=[s], **options, **LOPA_SCHED).stats[0]["nfe"] for p, s in zip(PROMPTS, SEEDS)]
    assert batch == alone
    assert all(b <= p for b, p in zip(batch, plain)) and any(b < p for b, p in zip(batch, plain))
    assert len(set(batch)) > 1


@pytest.mark.parametrize("options, words", [
    (dict(strategy="guided", temperature=0.8), "use temperature=0"),
    (dict(strategy="apd"), "needs an autoregressive helper"),
    (dict(strategy="ssd", stopper="sched"), "use stopper='none'"),
    (dict(strategy="freedave", stopper="prophet"), "use stopper='none'"),
], ids=["guided-T", "apd-no_helper", "ssd-sched", "freedave-prophet"])
@pytest.mark.parametrize("call", ["generate", "stream"])
def test_a_strategys_refusal_comes_at_the_call(monkeypatch, options, words, call):
    """A strategy's own checks (its check_config / check_model) refuse at the call, before any
    forward: ``stream`` returned and raised only at its first update."""
    lm = _model("llada")
    monkeypatch.setattr(lm.model, "forward", lambda *a, **k: pytest.fail("a forward ran"))
    with pytest.raises(ValueError, match=None) as err:
        getattr(lm, call)(PROMPTS[0], max_tokens=8, **options)  # no next(): the call itself refuses
    assert words in str(err.value)
