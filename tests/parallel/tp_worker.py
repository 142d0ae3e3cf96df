"""One torchrun rank of the tensor-parallel tests: loads each case's model with
``tensor_parallel=WORLD_SIZE`` and writes (rank 0) its logits on fixed inputs or its decoded
tokens to the JSON file given, for the test to compare with one process's.

Usage: python -m torch.distributed.run --nproc_per_node N tests/parallel/tp_worker.py SPEC OUT
SPEC: a JSON list of {"model": dir, "kind": "logits" | "generate" | "logprobs", "config": {...},
"prompts": [...] (generate, logprobs) / "ids": [[...]] (logits), "top": n (logprobs)}.
"""
from __future__ import annotations

import json
import os
import sys

import torch


def decode_logprobs(model, prompts: list[str], config, top: int) -> dict:
    """Decode ``prompts`` recording each committed token's logprob and ``top`` alternatives, as
    the server does (``CommitLogprobs`` on the decode state); the same call in one process and
    on every rank."""
    from dllm.engine.decoding import Decoding, RowStart
    from dllm.engine.logprobs import CommitLogprobs

    rows = [RowStart(prefix=model.encode(p), gen_length=config.gen_length, seed=config.seed) for p in prompts]
    decoding = Decoding(model.model, rows, config)
    state = decoding.state
    state.logprobs = CommitLogprobs(*state.order.shape, top=top, device=state.order.device)
    result = decoding.run()
    lp = state.logprobs
    return {"token_ids": result.answer.tolist(), "order": result.order.tolist(), "logprob": lp.logprob.tolist(),
            "top_ids": lp.top_ids.tolist(), "top_logprob": lp.top_logprob.tolist()}


def run(spec: list[dict], out: str) -> None:
    import dllm
    from dllm import GenerationConfig
    from dllm.engine.memory import plan_memory
    from dllm.parallel.dist import leave_together, run_rank

    size = int(os.environ["WORLD_SIZE"])

    def body(rank: int) -> None:
        results = []
        for case in spec:
            model = dllm.load(case["model"], device="cpu", dtype="float32", tensor_parallel=size)
            tp = model.model.tensor_parallel
            before = (tp.bytes_reduced, tp.bytes_gathered, tp.reduces, tp.gathers)
            if case["kind"] == "logits":
                ids = torch.tensor(case["ids"])
                pos = torch.arange(ids.shape[1])[None].expand_as(ids)
                with torch.no_grad():
                    shard = model.model(ids, pos)
                comm = [tp.bytes_reduced - before[0], tp.reduces - before[2]]  # the forward's own
                full = torch.cat(list(tp.all_gather(shard.contiguous())), dim=-1)  # for the test only
                results.append({"logits": full.tolist(), "forward_comm": comm})
            elif case["kind"] == "logprobs":
                results.append(decode_logprobs(model, case["prompts"], GenerationConfig(**case["config"]), case["top"]))
            else:
                cfg = GenerationConfig(**case["config"])
                if case.get("expect_error"):
                    try:
                        model.generate(case["prompts"], cfg)
                        results.append({"error": None})
                    except ValueError as err:
                        results.append({"error": str(err)})
                    results[-1]["comm"] = []
                    continue
                got = model.generate(case["prompts"], cfg, **case.get("structured", {}))
                results.append({"token_ids": got.token_ids,
                                "nfe": [s["nfe"] for s in got.stats],
                                "plan": plan_memory(model.model, len(case["prompts"]), 64, cfg).as_dict()})
            results[-1]["params"] = sum(t.numel() for t in model.model.state_dict().values())
            results[-1]["comm"] = [a - b for a, b in zip(
                (tp.bytes_reduced, tp.bytes_gathered, tp.reduces, tp.gathers), before)]
        if rank == 0:
            with open(out, "w") as f:
                json.dump(results, f)

    run_rank(body)
    leave_together()


if __name__ == "__main__":
    torch.set_num_threads(1)
    with open(sys.argv[1]) as f:
        run(json.load(f), sys.argv[2])
