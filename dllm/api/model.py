"""The Python API: ``model = dllm.load(path)``; ``out = model.generate(prompts, ...)``."""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Iterator, Sequence, Union

import torch

from dllm.engine.config import GenerationConfig
from dllm.engine.decoding import DecodeResult, Decoding, RowStart, check_prompts, decode
from dllm.engine.logprobs import check_logprobs
from dllm.api.decided import decided_rows
from dllm.api.inputs import check_messages, check_text, check_token_ids, is_messages, prompt_batch
from dllm.models import load_model, load_tokenizer
from dllm.models.loading import read_config
from dllm.models.batch_invariant import check_batch_invariant, make_batch_invariant
from dllm.models.bundled import resolve_model_path
from dllm.models.chat_template import set_chat_template
from dllm.models.helper import load_helper
from dllm.models.placement import resolve_device
from dllm.models.quantize import check_checkpoint_unquantized, check_quantize, quantize_linears
from dllm.models.tokenizer import check_decodable, check_tokenizer_fits
from dllm.api.outputs import GenerationOutput, end_row
from dllm.api.request import OutputRequest, check_stream_keywords, meant_keyword, merge_config, row_seeds
from dllm.api.streaming import StreamUpdate, stream_decoding
from dllm.api.structured import default_max_tokens, parse_constraint, row_constraint
from dllm.api.tools import ToolChoice, check_readable, parse_tool_choice, template_messages
from dllm.samplers.constraints import TableTooLarge
from dllm.validation import OptionTypeError

Message = dict[str, str]
Prompt = Union[str, Sequence[Message]]


def default_model_path() -> Path:
    """The small trained model that ships inside the package."""
    return resolve_model_path(None)


class DiffusionLM:
    """A loaded checkpoint (model + tokenizer) that generates with any policy and cache."""

    def __init__(self, model, tokenizer, path: Path) -> None:
        self.model, self.tokenizer, self.path = model, tokenizer, path

    def __repr__(self) -> str:
        """Which checkpoint this is and where it runs: name, family, size, device, dtype."""
        params = sum(p.numel() for p in self.model.parameters())
        size = f"{params / 1e9:.2f}B" if params >= 1e9 else f"{params / 1e6:.2f}M"
        dtype = str(self.model.dtype).removeprefix("torch.")
        return (f"DiffusionLM({Path(self.path).name!r}, family={self.model.config.family!r}, parameters={size}, "
                f"device={str(self.model.device)!r}, dtype={dtype!r})")

    def encode(self, prompt: Prompt, chat: bool | None = None, tools: list[dict] | None = None) -> list[int]:
        """Token ids of one prompt; chat messages (or a string with ``chat``) use the template,
        which also renders ``tools`` (OpenAI's function definitions) where it can."""
        if chat is not None and not isinstance(chat, bool):
            raise OptionTypeError(f"chat must be True, False or None, got {chat!r}")
        if isinstance(prompt, str):  # generate's checks, for callers that encode alone (the CLI, chat)
            check_text(prompt, "the prompt")
        elif is_messages(prompt):
            check_messages(prompt, 0)
        has_template = self.tokenizer.chat_template is not None
        if isinstance(prompt, str) and not (chat or (chat is None and has_template)):
            return self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        if chat is False:
            raise ValueError("chat=False reads a plain string as it is, but this prompt is chat messages, which are "
                             "read through the chat template: pass the text as a string, or drop chat=False")
        if not has_template:
            raise ValueError(f"the tokenizer in {self.path} has no chat template; pass plain text with chat=False")
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else template_messages(prompt)
        text = self.tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def generate(self, prompts: Prompt | Sequence[Prompt], config: GenerationConfig | None = None,
                 *, chat: bool | None = None, seeds: Sequence[int] | None = None, stop: str | Sequence[str] | None = None,
                 stop_token_ids: Sequence[int] | None = None, max_tokens: int | None = None, n: int = 1,
                 echo: bool = False, logprobs: int | None = None, regex: str | None = None,
                 choice: Sequence[str] | None = None, json_schema: dict | str | None = None, grammar: str | None = None,
                 tools: list[dict] | None = None, tool_choice: Any = None, parallel_tool_calls: bool | None = None,
                 tool_call_parser: str | None = None, **options: Any) -> GenerationOutput:
        """Generate for one prompt or many (ragged lengths are fine): a string, chat messages
        (``[{"role": "user", "content": ...}]``) or a list of those; token ids go to ``generate_ids``.

        ``chat``: put plain strings through the tokenizer's chat template (None: when it has one;
        messages always are). ``options`` are GenerationConfig fields, applied on top of ``config``. ``seeds``: one
        sampling seed per prompt (default: ``config.seed`` for each); a row samples the same
        tokens alone or in any batch, at any position. ``stop`` / ``stop_token_ids`` end a
        row's text before the first one; ``max_tokens`` sets the answer length (instead of
        ``gen_length``); ``n`` samples per prompt (seeds ``seed, seed + 1, ...``; rows grouped
        by prompt); ``echo`` puts the prompt's text before each answer, as the model read it (chat
        template included). ``logprobs``: each kept answer token's log-probability under the
        forward that committed it, with this many most likely alternatives (``output.logprobs``;
        strategy plain with stopper none or eotp, as the server's). Every row says why it
        ended in ``finish_reasons``. ``regex`` / ``choice`` / ``json_schema`` / ``grammar`` (Lark EBNF; one of them) keep
        every answer a word of that language, ending within ``max_tokens`` (structured output,
        ``dllm.samplers.constraints``). ``tools`` / ``tool_choice`` / ``parallel_tool_calls`` are
        OpenAI's (``dllm.api.tools``): the chat template shows the tools, a named or "required"
        choice decodes every answer as a call, and ``output.tool_calls`` holds each row's calls read
        from its text; ``tool_call_parser`` names the form "auto" calls take (vLLM's
        ``--tool-call-parser``: ``dllm.api.tool_parsers``; default Hermes', where the template shows
        it). All of it is checked before any model work.
        """
        tool = self._tool_choice(tools, tool_choice, parallel_tool_calls, echo, chat, regex, choice, json_schema,
                                 grammar, parser=tool_call_parser)
        request, config, constraint = self._prepare(config, options, self._request(
            stop, stop_token_ids, max_tokens, n, echo, logprobs), regex, choice, json_schema, grammar, tool)
        shown = None if tool is None else tool.template_tools()
        ids = [self.encode(p, chat, tools=shown) for p in prompt_batch(prompts)]
        out = self._generate(ids, config, seeds, request, constraint)
        if tool is not None:
            out.tool_calls = [tool.read(text)[1] for text in out.texts]
        return out

    def _tool_choice(self, tools, tool_choice, parallel_tool_calls, echo, chat, *constraints,
                     parser: str | None = None) -> ToolChoice | None:
        """generate's tools checked: shown through the chat template (not with ``chat=False``),
        ``auto`` only for a template that shows them readably or with a named ``parser``, and
        nothing else saying what the answer is (a constraint) or putting text before it (echo)."""
        tool = parse_tool_choice(tools, tool_choice, parallel_tool_calls, parser)
        if tool is not None and tool.mode != "none" and chat is False:
            raise ValueError("tools are shown to the model through its chat template, which chat=False skips; "
                             "drop chat=False (or the tools)")
        check_readable(tool, self.tokenizer, chosen=tool_choice is not None)
        if tool is not None and tool.mode != "none":
            if any(c is not None for c in constraints):
                raise ValueError(f"tool_choice {tool.mode!r} and regex / choice / json_schema / grammar both say what "
                                 'the answer is; give one (tool_choice "none" keeps the tools out)')
            if echo:
                raise ValueError("tool calls are read from the answer, and echo puts the prompt before it; drop echo")
        return tool

    def generate_ids(self, ids: list[list[int]], config: GenerationConfig | None = None, *,
                     seeds: Sequence[int] | None = None, stop: str | Sequence[str] | None = None,
                     stop_token_ids: Sequence[int] | None = None, max_tokens: int | None = None, n: int = 1,
                     echo: bool = False, logprobs: int | None = None, regex: str | None = None,
                     choice: Sequence[str] | None = None, json_schema: dict | str | None = None,
                     grammar: str | None = None, **options: Any) -> GenerationOutput:
        """``generate`` from token ids (a list of prompts, each a list of ids of this model)."""
        request, config, constraint = self._prepare(config, options, self._request(
            stop, stop_token_ids, max_tokens, n, echo, logprobs), regex, choice, json_schema, grammar)
        return self._generate(ids, config, seeds, request, constraint)

    def stream(self, prompt: Prompt, config: GenerationConfig | None = None, *, chat: bool | None = None,
               seed: int | None = None, stop: Any = None, stop_token_ids: Any = None,
               max_tokens: int | None = None, logprobs: int | None = None, regex: str | None = None,
               choice: Sequence[str] | None = None, json_schema: dict | str | None = None, grammar: str | None = None,
               tools: list[dict] | None = None, tool_choice: Any = None, parallel_tool_calls: bool | None = None,
               tool_call_parser: str | None = None, **options: Any) -> Iterator[StreamUpdate]:
        """Decode one prompt, yielding a ``StreamUpdate`` after each forward (newly committed
        positions, the canvas, the final prefix and its new text), then a last one with
        ``finished=True``. Same tokens as ``generate``; ``stop`` / ``stop_token_ids`` end the
        text (and the decode) at the first stop, ``max_tokens`` sets the answer length as in
        ``generate``, and so do ``regex`` / ``choice`` / ``json_schema`` / ``grammar`` (the final
        prefix of a constrained answer is a prefix of a word); ``logprobs`` as ``generate``'s, on every
        update (one per id of its ``final_ids``); ``tools`` as ``generate``'s, the calls on the last
        update (``tool_calls``). Bad input raises here, before any model work."""
        check_stream_keywords(options)
        tool = self._tool_choice(tools, tool_choice, parallel_tool_calls, False, chat, regex, choice, json_schema,
                                 grammar, parser=tool_call_parser)
        request, config, constraint = self._prepare(config, options, self._request(
            stop, stop_token_ids, max_tokens, 1, False, logprobs), regex, choice, json_schema, grammar, tool)
        prompts = prompt_batch(prompt)
        if len(prompts) != 1:
            raise ValueError(f"stream takes one prompt (a string or chat messages), got {len(prompts)}; "
                             "call it once per prompt, or use generate for a batch")
        shown = None if tool is None else tool.template_tools()
        ids = check_token_ids([self.encode(prompts[0], chat, tools=shown)], self.model.config.vocab_size)
        check_prompts(ids, config, self.model.config.max_sequence_length, request.max_tokens)
        if request.logprobs is not None:
            check_logprobs(request.logprobs, config)
        seed = config.seed if seed is None else seed
        row = RowStart(prefix=ids[0], gen_length=config.gen_length, seed=seed, constraint=constraint)
        decoding = Decoding(self.model, [row], config)
        if request.logprobs is not None:
            decoding.record_logprobs(request.logprobs)
        return stream_decoding(self, decoding, request, tool)

    def _prepare(self, config: GenerationConfig | None, options: dict[str, Any], request: OutputRequest,
                 regex, choice, json_schema, grammar,
                 tool: ToolChoice | None = None) -> tuple[OutputRequest, GenerationConfig, Any]:
        """The request, the decode's config and the rows' constraint (None: free; a forced tool
        call's schema), all checked. A constraint with a longest word sets the answer length of a
        call that set none (``structured.default_max_tokens``)."""
        if tool is not None and tool.forced:
            try:
                return self._prepare(config, options, request, None, None, tool.schema(), None)
            except TableTooLarge as err:  # a required call over many tools: the fixes are the tools'
                raise TableTooLarge(f"{err}{tool.too_large_hint()}") from None
        spec = parse_constraint(regex, choice, json_schema, grammar)
        merged = merge_config(config, options, request.max_tokens, model=self.model)
        bounded = default_max_tokens(self, spec, request.max_tokens, config is not None or "gen_length" in options,
                                     merged.gen_length)
        if bounded != request.max_tokens:
            request = dataclasses.replace(request, max_tokens=bounded)
            merged = merge_config(config, options, bounded, model=self.model)
        return request, merged, row_constraint(self, spec, request.stops, request.max_tokens, merged)

    def _request(self, stop, stop_token_ids, max_tokens, n, echo, logprobs) -> OutputRequest:
        return OutputRequest.parse(stop=stop, stop_token_ids=stop_token_ids, max_tokens=max_tokens, n=n,
                                   echo=echo, logprobs=logprobs, vocab_size=self.model.config.vocab_size)

    def _generate(self, ids: Any, config: GenerationConfig, seeds: Sequence[int] | None,
                  request: OutputRequest, constraint=None) -> GenerationOutput:
        ids = check_token_ids(ids, self.model.config.vocab_size)
        check_prompts(ids, config, self.model.config.max_sequence_length, request.max_tokens)
        row_seed = row_seeds(config, seeds, len(ids), request.n)
        rows = [prompt for prompt in ids for _ in range(request.n)]
        constraints = None if constraint is None else [constraint] * len(rows)
        result = decode(self.model, rows, config, seeds=row_seed, constraints=constraints,
                        decided=decided_rows(self, request, config), logprobs=request.logprobs)
        return self.to_output(result, rows, request)

    def decode_text(self, ids: list[int]) -> str:
        """Text of ids this model produced (special tokens kept; unknown ids are an error)."""
        check_decodable(ids, self.tokenizer, self.model.config.vocab_size, self.path)
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def to_output(self, result: DecodeResult, prompts: list[list[int]] | None = None,
                  request: OutputRequest | None = None) -> GenerationOutput:
        """Each row of a decode cut at its end (``outputs.end_row``), with its own statistics."""
        request = request or OutputRequest()
        out = GenerationOutput(texts=[], token_ids=[], memory=result.memory,
                               logprobs=None if request.logprobs is None else [])
        for row, answer in enumerate(result.answer.tolist()):
            stopped, kept = end_row(answer, self.decode_text, self.model.eos_token_ids, request)
            check_decodable(kept, self.tokenizer, self.model.config.vocab_size, self.path)
            echoed = self.decode_text(prompts[row]) if request.echo and prompts is not None else ""
            out.texts.append(echoed + stopped.text)
            out.token_ids.append(kept)
            if prompts is not None:
                out.prompt_token_ids.append(list(prompts[row]))
            out.finish_reasons.append(stopped.finish_reason)
            out.decode_order.append(result.order[row, : len(kept)].tolist())
            if out.logprobs is not None:
                out.logprobs.append(result.logprobs.read(row, 0, len(kept), request.logprobs))
            nfe = int(result.nfe[row])
            out.stats.append({
                "nfe": nfe, "tokens": len(kept), "tpf": len(kept) / max(nfe, 1),
                "token_forwards": int(result.token_forwards[row]),
                "draft_rows": int(result.draft_rows[row]), "seconds": result.row_seconds[row],
                **({} if result.edits is None else {"edits": int(result.edits[row])}),
            })
        return out


def load(path: str | Path | None = None, *, device: str | torch.device = "auto",
         dtype: str | torch.dtype = "auto", prepack: bool = False, revision: str | None = None,
         tensor_parallel: int = 1,
         quantize: str | None = None, adapter: str | Path | None = None,
         helper: str | Path | None = None, batch_invariant: bool = False,
         chat_template: str | Path | None = None, trust_remote_code: bool = False, **unknown: Any) -> DiffusionLM:
    """Load a checkpoint directory, a bundled model by name (``dllm models`` lists them;
    default: the bundled LLaDA-layout model), or a Hugging Face hub id (``org/name``) from the
    user's hub cache, fetching only the files dllm reads when they are not there
    (``dllm.models.hub``; ``HF_HUB_OFFLINE=1`` honoured). A local directory wins over a name.

    device: "auto" (CUDA when present, else CPU; ``$DLLM_DEVICE`` overrides), "cpu", "cuda:N".
    dtype: "auto" (the checkpoint's ``torch_dtype``, else bfloat16 on a GPU, float32 on the
    CPU), "float32", "bfloat16" or "float16".
    prepack: on the CPU, reorder the linear weights for oneDNN once (faster decode steps; the
    logits move by float rounding from the default path; ``dllm.models.prepack``).
    revision: a hub id's branch, tag or commit (default: main); only for hub ids.
    quantize: "int8" (weight-only int8, any device) or "float8" (weight-only float8, NVIDIA GPUs
    of compute capability 8.9+): every linear but the LM head quantized at load through torchao
    (``dllm.models.quantize``; the memory plan counts the stored bytes). Checkpoints stored
    quantized (GPTQ, AWQ, compressed-tensors, fp8, ...) are refused whatever this says.
    tensor_parallel: split the model over this many processes of a torchrun job (each rank calls
    ``dllm.load`` and ``generate`` alike and reads only its slices; ``dllm.parallel.tensor_plan``).
    A size that does not divide the heads, K/V heads, MLP, experts or vocabulary is refused
    before any weight is read; a job of more processes (a multiple) holds one copy of the model per
    this many ranks (``dllm.parallel.groups``), each copy's ranks calling alike.
    adapter: a PEFT LoRA adapter directory (``adapter_config.json`` + ``adapter_model.safetensors``)
    merged into the weights at load (``W += alpha / r * B @ A``; ``dllm.models.adapters``), e.g.
    D2F's students over LLaDA-8B-Instruct or Dream-7B; checked against the base before any weight
    is read.
    helper: an autoregressive helper (a causal LM directory, a bundled helper's name such as
    ``dllm-waitingline-ar``, or a hub id) loaded through transformers' AutoModelForCausalLM on the
    model's device and dtype, for the strategies that use one (``apd``); its tokenizer must be the
    model's (the first mismatch is named; ``dllm.models.helper``).
    batch_invariant: on CUDA, run the linears, RMSNorms, attention and log-probabilities through
    Triton kernels whose reduction order does not depend on the row count or the padding, so a
    row's logits do not move with its batch (``dllm.models.batch_invariant``; DiffusionGemma's
    own norms, attention and self-conditioning included); the MoE grouped product is not yet
    measured on a GPU (a warning says so). With tensor_parallel, on every device, each sum all-reduce gathers the
    ranks' parts and adds them in rank order (``TensorShard.fixed_order``). Refused with quantize.
    On the CPU it otherwise changes nothing: there a ragged batch's rows already decode their
    batch-1 tokens.
    chat_template: the chat template to use instead of the checkpoint's (a file's path or the Jinja
    text, as vLLM's ``--chat-template``), e.g. one that shows tools; rendered once before any weight
    is read (``dllm.models.chat_template``).
    trust_remote_code: taken as transformers and vLLM take it, and changes nothing: dllm runs no
    code from a checkpoint (each family is its own module), so there is nothing to trust.
    Other keywords of transformers' ``from_pretrained`` are refused naming dllm's (``torch_dtype``:
    ``dtype``; ``device_map``: ``device``, the whole model on one device).
    """
    check_load_keywords(unknown, trust_remote_code)
    if path is not None and not isinstance(path, (str, os.PathLike)):
        raise OptionTypeError(f"path must be a checkpoint directory, a bundled model's name or a hub id "
                              f"(str or Path), got {type(path).__name__}")
    if revision is not None and not isinstance(revision, str):
        raise OptionTypeError(f"revision must be a branch, tag or commit (str), got {type(revision).__name__}")
    if adapter is not None and not isinstance(adapter, (str, os.PathLike)):
        raise OptionTypeError(f"adapter must be a LoRA adapter directory (str or Path), got {type(adapter).__name__}")
    if helper is not None and not isinstance(helper, (str, os.PathLike)):
        raise OptionTypeError(f"helper must be a causal LM's directory, a bundled helper's name or a hub id "
                              f"(str or Path), got {type(helper).__name__}")
    if helper is not None and tensor_parallel != 1:
        raise ValueError("an autoregressive helper is not split under tensor parallelism; load without "
                         "tensor_parallel (or without helper)")
    if adapter is not None and tensor_parallel != 1:
        raise ValueError("a LoRA adapter cannot be merged under tensor parallelism yet; merge it into a "
                         "checkpoint first, or load without tensor_parallel")
    swap_invariant = check_batch_invariant(batch_invariant, resolve_device(device),
                                           quantize=quantize)  # before any weight is read
    path = resolve_model_path(path, revision)
    check_checkpoint_unquantized(Path(path))
    config = read_config(Path(path))[1]
    tokenizer = load_tokenizer(path)  # a tokenizer that is missing or does not fit fails before any weight is read
    check_tokenizer_fits(tokenizer, config, path)
    if chat_template is not None:
        set_chat_template(tokenizer, chat_template)
    shard = None
    if tensor_parallel != 1:
        from dllm.parallel.groups import join_tensor_group
        from dllm.parallel.tensor_plan import check_plan

        check_plan(config, tensor_parallel)  # before the group forms or weights are read
        shard, device = join_tensor_group(tensor_parallel, str(device))
        shard.fixed_order = batch_invariant  # sums in rank order whatever the shape (TensorShard)
    mode = check_quantize(quantize, resolve_device(device), prepack=prepack)  # before any weight is read
    model = load_model(path, dtype=dtype, device=device, prepack=prepack, tensor_parallel=shard, adapter=adapter)
    if mode is not None:
        quantize_linears(model, mode)
    if swap_invariant:
        make_batch_invariant(model)
    if helper is not None:
        model.helper = load_helper(helper, tokenizer, device=model.device, dtype=model.dtype)
    return DiffusionLM(model, tokenizer, path)


# transformers' from_pretrained keywords and the load() keyword that does their job here
LOAD_FOREIGN = {"torch_dtype": "dtype", "device_map": "device", "model_name_or_path": "path", "pretrained": "path",
                "pretrained_model_name_or_path": "path", "model": "path", "quantization_config": "quantize",
                "tensor_parallel_size": "tensor_parallel"}


def check_load_keywords(unknown: dict[str, Any], trust_remote_code: Any) -> None:
    """load()'s keywords beyond its own refused before any file is read, each named with the one
    meant (a transformers user's ``torch_dtype=``, ``device_map="auto"``, or a typo)."""
    if not isinstance(trust_remote_code, bool):
        raise OptionTypeError(f"trust_remote_code must be True or False, got {trust_remote_code!r}")
    if unknown:
        import inspect

        known = [name for name in inspect.signature(load).parameters if name != "unknown"]
        name = sorted(unknown)[0]
        raise OptionTypeError(f"load() got unknown keyword(s) {sorted(unknown)}; known: {known}"
                              f"{meant_keyword(name, known, foreign=LOAD_FOREIGN, call=())}")
