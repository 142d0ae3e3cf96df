"""One torchrun rank of the tensor-parallel tests: loads each case's model with
``tensor_parallel=WORLD_SIZE`` and writes (rank 0) its logits on fixed inputs or its decoded
tokens to the JSON file given, for the test to compare with one process's.

Usage: python -m torch.distributed.run --nproc_per_node N tests/parallel/tp_worker.py SPEC OUT
SPEC: a JSON list of {"model": dir, "kind": "logits" | "denoise" | "generate" | "logprobs",
"config": {...}, "prompts": [...] (generate, logprobs) / "ids": [[...]] (logits, denoise: the
prefix; "canvas": [[...]] the canvas), "top": n (logprobs)}. ``denoise``: a uniform-state model
(DiffusionGemma) encodes the prefix and denoises the canvas twice, the second time
self-conditioned on the first's logits (``denoise_logits``)."""
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


def denoise_logits(model, ids: torch.Tensor, canvas: torch.Tensor) -> torch.Tensor:
    """(2, B, C, vocab): a DiffusionGemma's denoiser logits of ``canvas`` (B, C) after the prefix
    ``ids`` (B, T), first alone, then self-conditioned on those; the same call everywhere."""
    B, T = ids.shape
    positions = torch.arange(T)[None].expand(B, T)
    store = model.new_prefix()
    with torch.no_grad():
        model.encode(ids, positions, torch.ones(B, T, dtype=torch.bool), store)
        at = torch.arange(T, T + canvas.shape[1])[None].expand(B, -1)
        first = model.denoise(canvas, at, store)
        return torch.stack([first, model.denoise(canvas, at, store, first)])


def run(spec: list[dict], out: str) -> None:
    import dllm
    from dllm import GenerationConfig
    from dllm.engine.memory import plan_memory
    from dllm.engine.uniform_state import uniform_state_config
    from dllm.parallel.dist import leave_together, run_rank

    size = int(os.environ["WORLD_SIZE"])

    def body(rank: int) -> None:
        results = []
        for case in spec:
            model = dllm.load(case["model"], device="cpu", dtype="float32", tensor_parallel=size)
            # DiffusionGemma's shard sits beside tensor_parallel, which stays None: its logits are whole rows
            tp = model.model.tensor_parallel or model.model.tensor_shard
            before = (tp.bytes_reduced, tp.bytes_gathered, tp.reduces, tp.gathers)
            if case["kind"] == "logits":
                ids = torch.tensor(case["ids"])
                pos = torch.arange(ids.shape[1])[None].expand_as(ids)
                with torch.no_grad():
                    shard = model.model(ids, pos)
                comm = [tp.bytes_reduced - before[0], tp.reduces - before[2]]  # the forward's own
                full = torch.cat(list(tp.all_gather(shard.contiguous())), dim=-1)  # for the test only
                results.append({"logits": full.tolist(), "forward_comm": comm})
            elif case["kind"] == "denoise":
                logits = denoise_logits(model.model, torch.tensor(case["ids"]), torch.tensor(case["canvas"]))
                results.append({"logits": logits.tolist(),
                                "forward_comm": [tp.bytes_reduced - before[0], tp.reduces - before[2]]})
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
                plan = plan_memory(model.model, len(case["prompts"]), 64, uniform_state_config(model.model, cfg))
                results.append({"token_ids": got.token_ids, "nfe": [s["nfe"] for s in got.stats],
                                "plan": plan.as_dict()})
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
