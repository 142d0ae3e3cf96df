"""lm-eval's own API model (``local-completions``, ``LocalCompletionsAPI``) against the server, as
README documents it: ``generate_until`` gives ``generate``'s text for the server's options, with
token-id and text requests, batches of 2, and through /v1/chat/completions (``local-chat-completions``);
``loglikelihood`` (lm-eval asks ``echo``, ``logprobs`` 1,
``max_tokens`` 1 and sums the echoed logprobs after the context, the answer's one token left out)
equals the log-softmax of one forward of context + continuation + the answer canvas masked (one
block for max_tokens 1), computed here."""
from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("lm_eval")
from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.models.api_models import JsonChatStr  # noqa: E402
from lm_eval.models.openai_completions import LocalChatCompletion, LocalCompletionsAPI  # noqa: E402

from dllm.serve.app import create_app  # noqa: E402
from dllm.serve.protocol import SchedulerLimits  # noqa: E402
from dllm.serve.requests import ServerDefaults  # noqa: E402
from dllm.serve.scheduler import BatchScheduler  # noqa: E402
from serve_helpers import running_server  # noqa: E402

BLOCK, GEN = 8, 16
PROMPTS = ["Alice Smith, Bob Jones, Carol White. Who is second?", "Bob"]
TOL = 1e-4


@pytest.fixture(scope="module")
def served(tiny_models):
    model = tiny_models["llada"]
    scheduler = BatchScheduler(model, SchedulerLimits(max_batch=4, max_queue=8))
    app = create_app(model, scheduler, defaults=ServerDefaults(options={"block_length": BLOCK}, max_tokens=GEN),
                     served_name="m")
    try:
        with running_server(app) as url:
            yield model, url
    finally:
        scheduler.close()


def client(model, url: str, tokenized: bool) -> LocalCompletionsAPI:
    return LocalCompletionsAPI(model="m", base_url=url + "/v1/completions", tokenizer_backend="huggingface",
                               tokenizer=str(model.path), tokenized_requests=tokenized, batch_size=2,
                               max_gen_toks=GEN, max_retries=1, timeout=60)


@pytest.mark.parametrize("tokenized", [True, False])
def test_generate_until_gives_generates_text(served, tokenized):
    model, url = served
    lm = client(model, url, tokenized)
    requests = [Instance("generate_until", {}, (p, {"until": ["\n\n"], "max_gen_toks": GEN}), i)
                for i, p in enumerate(PROMPTS)]
    texts = lm.generate_until(requests)
    want = model.generate(PROMPTS, chat=False, max_tokens=GEN, block_length=BLOCK, stop=["\n\n"]).texts
    assert texts == want


def test_chat_completions_generate_until_gives_generates_text(served):
    """``local-chat-completions`` (lm-eval's chat API model, as with --apply_chat_template): the
    messages it sends get the chat template, and the text is generate's for those messages."""
    model, url = served
    lm = LocalChatCompletion(model="m", base_url=url + "/v1/chat/completions", tokenizer_backend=None,
                             tokenized_requests=False, max_gen_toks=GEN, max_retries=1, timeout=60)
    chats = [[{"role": "user", "content": p}] for p in PROMPTS]
    requests = [Instance("generate_until", {}, (JsonChatStr(json.dumps(c)), {"until": ["\n\n"], "max_gen_toks": GEN}), i)
                for i, c in enumerate(chats)]
    want = model.generate(chats, max_tokens=GEN, block_length=BLOCK, stop=["\n\n"]).texts
    assert lm.generate_until(requests) == want


def test_loglikelihood_is_one_plain_forwards_logsoftmax(served):
    model, url = served
    lm = client(model, url, True)
    pairs = [("Alice Smith, Bob Jones,", " Carol White"), ("The list:", " Bob")]
    results = lm.loglikelihood([Instance("loglikelihood", {}, pair, i) for i, pair in enumerate(pairs)])
    for (context, continuation), (value, greedy) in zip(pairs, results):
        ctx = model.encode(context, chat=False)
        ids = ctx + model.encode(context + continuation, chat=False)[len(ctx):]
        tokens = torch.tensor([ids + [model.model.mask_token_id] * BLOCK], device=model.model.device)
        positions = torch.arange(tokens.shape[1], device=tokens.device)[None]  # the served model's device
        with torch.no_grad():
            logp = torch.log_softmax(model.model(tokens, positions)[0].double(), dim=-1)
        span = range(len(ctx), len(ids))  # LLaDA layout: position i's token from output i
        assert value == pytest.approx(sum(float(logp[i, ids[i]]) for i in span), abs=TOL * len(span))
        assert greedy == all(int(logp[i].argmax()) == ids[i] for i in span)
