"""``dllm`` as an lm-evaluation-harness model (registered under the name ``dllm``).

    python -m dllm.eval --model dllm --model_args pretrained=DIR,policy=threshold,tau=0.9,\\
        cache=dual,block_length=32,gen_length=256 --tasks gsm8k --device cuda --output_path OUT

* generate_until: requests are decoded in batches of ``--batch_size`` (ragged prompts, longest
  first) with the one decode engine; a task's ``max_gen_toks`` becomes the answer length
  (rounded up to a multiple of ``block_length``; the text keeps at most ``max_gen_toks`` tokens),
  and its ``until`` strings cut the finished text at the first one.
* loglikelihood: LLaDA's Monte-Carlo estimate of the masked-diffusion bound
  (``dllm.eval.likelihood``), ``mc_num`` draws per request; is_greedy from a one-token-per-step
  low-confidence decode of the continuation (``greedy_check``).
* loglikelihood_rolling (perplexity tasks) is refused with a message.
* Every request's NFE, tokens and seconds go to ``save_dir`` (``dllm.eval.records``), which
  also lets a rerun skip finished requests; ``dllm_speed.json`` sums them per task.
* Under torchrun, lm-eval shards the documents by rank; the group is joined here. With
  ``tensor_parallel=T`` each copy of the model spans T ranks (``dllm.parallel.groups``): lm-eval
  sees the copies as its ranks, its collectives run between the ranks holding the same shard, and
  a copy's first rank writes the records (lm-eval writes results on LOCAL_RANK 0 alone).
  loglikelihood needs whole-vocabulary log-probabilities and is refused there.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

import torch
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model
from tqdm import tqdm

import dllm
from dllm.engine.block_alignment import block_causal_window
from dllm.engine.config import GenerationConfig
from dllm.engine.decoding import check_prompts, decode
from dllm.eval.likelihood import check_likelihood_model, mc_loglikelihood
from dllm.eval.model_args import merge_flags, parse_model_args
from dllm.eval.records import RequestRecords, fingerprint
from dllm.eval.text import block_aligned_length, cut_at_stop

log = logging.getLogger("dllm.eval")

# lm-eval generation kwargs and what they set; anything else is named in a warning.
SAMPLING_KWARGS = ("temperature", "top_p", "top_k")
HANDLED_KWARGS = {"until", "max_gen_toks", "do_sample", *SAMPLING_KWARGS}


@register_model("dllm")
class DllmLM(LM):
    """A dllm checkpoint and a GenerationConfig, answering lm-eval's requests."""

    def __init__(self, **model_args: Any) -> None:
        super().__init__()
        self.options, self.config = parse_model_args(model_args)
        self.block_given = model_args.get("block_length") is not None
        tp = self.options.tensor_parallel
        self._rank, self._world_size, self._group, writes = _join_group(self.options.device, tp)
        device = _device(self.options.device, self._rank if self._world_size > 1 or tp > 1 else None)
        self._device = torch.device(device)
        self.dllm = dllm.load(self.options.pretrained, device=device, dtype=self.options.dtype,
                              prepack=self.options.prepack, revision=self.options.revision,
                              quantize=self.options.quantize, tensor_parallel=tp, adapter=self.options.adapter)
        self.model, self.tokenizer = self.dllm.model, self.dllm.tokenizer
        dtype = str(self.model.dtype).removeprefix("torch.")  # as loaded: "auto" resolved
        run = {"model": str(self.dllm.path), "dtype": dtype, "config": _config_dict(self.config),
               "mc_num": self.options.mc_num, "greedy_check": self.options.greedy_check,
               **({"prepack": True} if self.options.prepack else {}),  # default runs keep their records
               **({"quantize": self.options.quantize} if self.options.quantize else {}),
               **({"adapter": self.options.adapter} if self.options.adapter else {})}
        self.records = RequestRecords(self.options.save_dir, self._rank, fingerprint(run), writes=writes)
        if tp > 1:  # every rank has read the records before any writes: a copy's ranks skip alike
            torch.distributed.barrier()
        self._warned: set[str] = set()

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None) -> "DllmLM":
        """lm-eval's constructor from ``--model_args`` text and its flags (``model_args.merge_flags``)."""
        from lm_eval.utils import simple_parse_args_string

        return cls(**merge_flags(simple_parse_args_string(arg_string), additional_config))

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict[str, Any], additional_config: dict | None = None) -> "DllmLM":
        """lm-eval's constructor from parsed ``--model_args`` and its flags (``model_args.merge_flags``)."""
        return cls(**merge_flags(arg_dict, additional_config))

    # ------------------------------------------------------------------ chat template

    @property
    def tokenizer_name(self) -> str:
        return str(self.dllm.path).replace("/", "__")

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        return self.tokenizer.chat_template

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        if self.tokenizer.chat_template is None:
            raise ValueError(f"the tokenizer in {self.dllm.path} has no chat template; drop --apply_chat_template")
        return self.tokenizer.apply_chat_template(chat_history, tokenize=False,
                                                  add_generation_prompt=add_generation_prompt)

    def tok_encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def encode_context(self, text: str) -> list[int]:
        """A context's ids, after the beginning-of-text token when ``add_bos_token`` asks."""
        ids = self.tok_encode(text)
        bos = self.tokenizer.bos_token_id
        if self.options.add_bos_token:
            if bos is None:
                raise ValueError(f"add_bos_token=true, but the tokenizer in {self.dllm.path} has no bos token")
            if ids[:1] != [bos]:
                ids = [bos, *ids]
        return ids

    # ------------------------------------------------------------------ generate_until

    def request_config(self, gen_kwargs: dict[str, Any]) -> tuple[GenerationConfig, int]:
        """The GenerationConfig of one request and its token limit (``max_gen_toks``).

        Without ``block_length`` in model_args the answer is one block of ``max_gen_toks``
        (steps scaled to keep model_args' tokens per step); with it, whole blocks of that size
        and model_args' steps per block. Sampling kwargs of the task replace model_args';
        ``do_sample`` false is argmax, true without a temperature samples at 1 (transformers'); a
        temperature the task gives is kept beside it, 0 included (vLLM's reading).
        """
        unknown = sorted(set(gen_kwargs) - HANDLED_KWARGS)
        if unknown and str(unknown) not in self._warned:
            self._warned.add(str(unknown))
            log.warning("generation kwargs %s have no meaning for the dllm model and are ignored", unknown)
        base = self.config
        max_tokens = gen_kwargs.get("max_gen_toks", base.gen_length)
        values = _config_dict(base)
        if self.block_given:
            gen_length = block_aligned_length(max_tokens, base.block_length)
            values["steps"] = base.steps_per_block * (gen_length // base.block_length)
        else:
            gen_length = block_aligned_length(max_tokens, None)
            values["block_length"] = gen_length
            values["steps"] = max(1, round(gen_length * base.steps / base.gen_length))
            window = base.sub_block_length or gen_length
            if base.block_add_threshold is None:  # a block-causal model's windows stay inside its blocks
                window = block_causal_window(self.model, window)
            if window < gen_length:  # whole steps per window, as the engine splits them
                windows = gen_length // window
                values["steps"] = windows * max(1, values["steps"] // windows)
        values["gen_length"] = gen_length
        for key in SAMPLING_KWARGS:
            if key in gen_kwargs:
                values[key] = gen_kwargs[key]
        if gen_kwargs.get("do_sample") is False:
            values["temperature"] = 0.0
        elif gen_kwargs.get("do_sample") is True and values["temperature"] == 0 and "temperature" not in gen_kwargs:
            values["temperature"] = 1.0  # transformers' default: sampling was asked for, not argmax
        try:
            return GenerationConfig(**values), max_tokens
        except (TypeError, ValueError) as err:
            raise ValueError(f"generation kwargs {gen_kwargs}: {err}") from err

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        prepared, seen = [], {}
        for i, request in enumerate(requests):
            context, gen_kwargs = request.args
            gen_kwargs = dict(gen_kwargs or {})
            config, max_tokens = self.request_config(gen_kwargs)
            ids = self.encode_context(context)
            if not ids:
                raise ValueError(f"request {i} ({_where(request)}): the context {context!r} encodes to no tokens, and "
                                 "a decode needs one; add_bos_token=true in --model_args starts it with the "
                                 "beginning-of-text token (as an empty loglikelihood context is)")
            try:
                asked = (max_tokens, "max_gen_toks") if "max_gen_toks" in gen_kwargs else ()  # the task's length
                check_prompts([ids], config, self.model.config.max_sequence_length, *asked)
            except ValueError as err:
                raise ValueError(f"request {i} ({_where(request)}): {err}") from err
            # lm-eval repeats a request for several samples: the k-th copy samples with seed + k
            repeat = seen[repr(request.args)] = seen.get(repr(request.args), -1) + 1
            prepared.append((ids, config, max_tokens, gen_kwargs.get("until"), [*request.args, repeat]))
        results: list[str | None] = [None] * len(requests)
        pending: dict[str, list[int]] = {}
        for i, (ids, config, _, _, key) in enumerate(prepared):
            done = self.records.get("generate_until", key)
            if done is not None:
                results[i] = done["result"]
            else:  # requests that decode alike share batches, longest prompt first
                pending.setdefault(repr(_config_dict(config)), []).append(i)
        bar = tqdm(total=sum(map(len, pending.values())), desc="dllm generate_until",
                   disable=disable_tqdm or self._rank != 0)
        for group in pending.values():
            group.sort(key=lambda i: -len(prepared[i][0]))
            for start in range(0, len(group), self.options.batch_size):
                batch = group[start : start + self.options.batch_size]
                config = prepared[batch[0]][1]
                seeds = [config.seed + prepared[i][4][-1] for i in batch]
                out = self.dllm.generate_ids([prepared[i][0] for i in batch], config, seeds=seeds)
                for i, ids, stats in zip(batch, out.token_ids, out.stats):
                    _, _, max_tokens, until, key = prepared[i]
                    text = self._answer_text(ids, max_tokens)
                    results[i] = cut_at_stop(text, until)
                    self._record("generate_until", requests[i], key, results[i], {
                        "text": text, "nfe": stats["nfe"], "tokens": stats["tokens"],
                        "token_forwards": stats["token_forwards"], "draft_rows": stats["draft_rows"],
                        "seconds": stats["seconds"] / len(batch)})
                bar.update(len(batch))
        bar.close()
        self._write_speed()
        return results

    def _answer_text(self, ids: list[int], max_tokens: int) -> str:
        """The answer's text before its first end-of-text, at most ``max_tokens`` tokens."""
        eos = set(self.model.eos_token_ids)
        text_ids = ids[:-1] if ids and ids[-1] in eos else ids
        return self.tokenizer.decode(text_ids[:max_tokens], skip_special_tokens=False)

    # ------------------------------------------------------------------ loglikelihood

    def _encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """Context and continuation ids as lm-eval's models split them: trailing spaces of the
        context move to the continuation, and the continuation is what the joint text adds."""
        spaces = len(context) - len(context.rstrip())
        if spaces:
            context, continuation = context[:-spaces], context[-spaces:] + continuation
        whole = self.tok_encode(context + continuation)
        context_ids = self.tok_encode(context)
        continuation_ids = whole[len(context_ids):]
        context_ids = self.encode_context(context) if context_ids else []
        if not context_ids:  # an empty context is conditioned on a start token
            start = self.tokenizer.bos_token_id
            context_ids = [start if start is not None else self.model.eos_token_ids[0]]
        return context_ids, continuation_ids

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        if self.config.cfg_scale > 0:
            raise ValueError("cfg_scale applies to generate_until only; pass cfg_scale=0 for loglikelihood "
                             "(multiple-choice) tasks")
        check_likelihood_model(self.model)
        if self.options.tensor_parallel > 1:
            raise ValueError("loglikelihood (multiple-choice) tasks need whole-vocabulary log-probabilities, "
                             "which tensor parallelism does not combine yet; evaluate them without "
                             "tensor_parallel (generate_until tasks run with it)")
        pairs = [self._encode_pair(*request.args) for request in requests]
        limit = self.model.config.max_sequence_length
        for i, (context, continuation) in enumerate(pairs):  # every request, before any forward
            if not continuation:
                raise ValueError(f"request {i} ({_where(requests[i])}): the continuation {requests[i].args[1]!r} "
                                 "encodes to no tokens")
            if len(context) + len(continuation) > limit:
                raise ValueError(f"request {i} ({_where(requests[i])}): {len(context)} context + {len(continuation)} "
                                 f"continuation tokens exceed the model's context of {limit}; shorten the "
                                 "context (fewer --num_fewshot examples), as nothing is cut from it")
        results: list[tuple[float, bool] | None] = [None] * len(requests)
        pending = []
        for i, request in enumerate(requests):
            done = self.records.get("loglikelihood", request.args)
            if done is not None:
                results[i] = tuple(done["result"])
            else:
                pending.append(i)
        bar = tqdm(total=len(pending), desc="dllm loglikelihood", disable=disable_tqdm or self._rank != 0)
        step = self.options.batch_size
        for start in range(0, len(pending), step):  # a few requests at a time: records keep up
            chunk = pending[start : start + step]
            estimates = mc_loglikelihood(self.model, [pairs[i] for i in chunk], mc_num=self.options.mc_num,
                                         batch_size=self.options.batch_size, seed=self.config.seed)
            greedy = self._greedy([pairs[i] for i in chunk])
            for i, est, (is_greedy, greedy_nfe, greedy_tf, greedy_s) in zip(chunk, estimates, greedy):
                results[i] = (est.mean, is_greedy)
                self._record("loglikelihood", requests[i], requests[i].args, [est.mean, is_greedy], {
                    "stderr": est.stderr, "mc_num": self.options.mc_num, "nfe": est.nfe + greedy_nfe,
                    "token_forwards": est.token_forwards + greedy_tf, "tokens": 0,
                    "scored_tokens": len(pairs[i][1]), "seconds": est.seconds + greedy_s})
            bar.update(len(chunk))
        bar.close()
        self._write_speed()
        return results

    def _greedy(self, pairs: list[tuple[list[int], list[int]]]) -> list[tuple[bool, int, int, float]]:
        """(continuation == greedy decode, its NFE, token-forwards, seconds) per pair: one token
        per step, most confident first (LLaDA's check), batched by continuation length."""
        if not self.options.greedy_check:
            return [(False, 0, 0, 0.0)] * len(pairs)
        out: list[tuple[bool, int, int, float] | None] = [None] * len(pairs)
        by_length: dict[int, list[int]] = {}
        for i, (_, continuation) in enumerate(pairs):
            by_length.setdefault(len(continuation), []).append(i)
        for length, rows in by_length.items():
            config = GenerationConfig(gen_length=length, steps=length, policy="low_confidence", stop_at_eos=False,
                                      seed=self.config.seed)
            result = decode(self.model, [pairs[i][0] for i in rows], config)
            for row, i in enumerate(rows):
                same = result.answer[row].tolist() == list(pairs[i][1])
                out[i] = (same, int(result.nfe[row]), int(result.token_forwards[row]), result.wall_time / len(rows))
        return out

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        raise NotImplementedError(
            "the dllm model does not answer loglikelihood_rolling (perplexity tasks such as wikitext): a "
            "masked-diffusion model gives a Monte-Carlo bound on a continuation given its context, not the "
            "left-to-right token probabilities a rolling perplexity sums; evaluate generate_until or "
            "multiple-choice (loglikelihood) tasks")

    # ------------------------------------------------------------------ records, processes

    def _record(self, kind: str, request, key: Any, result: Any, fields: dict[str, Any]) -> None:
        self.records.add(kind, key, {"task": request.task_name, "doc_id": request.doc_id,
                                     "result": result, **fields})
        self.cache_hook.add_partial(kind, request.args, result)

    def _write_speed(self) -> None:
        """The speed of this run's requests, every rank's (records.write_speed)."""
        keys = self.records.used
        if self._world_size > 1:
            self.barrier()  # every rank's records are written
            gathered = self.gather_object(sorted(keys))
            keys = set().union(*gathered) if gathered is not None else keys
        if self._rank == 0:
            self.records.write_speed(keys)

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        if self._world_size == 1:
            return tensor
        parts = [torch.zeros_like(tensor) for _ in range(self._world_size)]
        torch.distributed.all_gather(parts, tensor, group=self._group)
        return torch.stack(parts)

    def gather_object(self, obj: Any, dst: int = 0) -> list[Any] | None:
        if self._world_size == 1:
            return [obj]
        gathered = [None] * self._world_size if self._rank == dst else None
        if self._group is not None:  # lm-eval's rank dst among the copies: a global rank in the peer group
            dst = torch.distributed.get_global_rank(self._group, dst)
        torch.distributed.gather_object(obj, gathered, dst=dst, group=self._group)
        return gathered

    def barrier(self) -> None:
        if self._world_size > 1:
            torch.distributed.barrier(group=self._group)


def _config_dict(config: GenerationConfig) -> dict[str, Any]:
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}


def _where(request) -> str:
    return f"task {request.task_name}, doc {request.doc_id}"


def _join_group(device: str, tensor_parallel: int = 1) -> tuple[int, int, Any, bool]:
    """(rank, world size, group, writes) as lm-eval should see them: the torchrun group when
    launched by torchrun, else (0, 1); under tensor parallelism the copies of the model are the
    ranks, joined by this rank's peer group, and only a copy's first rank writes records."""
    if "RANK" not in os.environ and tensor_parallel == 1:
        return 0, 1, None, True
    from dllm.parallel.groups import join_groups

    layout, _ = join_groups(tensor_parallel, device)  # refuses a job the size does not fit
    return layout.group_index, layout.groups, layout.peer_group, layout.leads


def _device(device: str, rank: int | None) -> str:
    """The torch device to load on ("auto": ``dllm.models.placement.auto_device``); a CUDA device
    that is not there is an error naming --device."""
    if device == "auto":
        from dllm.models.placement import auto_device

        device = str(auto_device())
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r} is not available on this machine (no CUDA); pass --device cpu")
        if rank is not None:
            return f"cuda:{int(os.environ.get('LOCAL_RANK', rank))}"
    return device
