"""Mutation check, run on demand (issue 44, item 5): does the suite catch a broken claim?

Each mutation is one line of documented behaviour changed (a tempered log-softmax, a threshold
comparison flipped at its tie, the cache's V write deleted, ...), with the tests that must fail
on it. The package and the tests are copied to a temporary folder once; each mutation is applied
to that copy only (never to the working tree, which others may be editing), the named tests run
against it (``PYTHONPATH`` and the working directory point at the copy), and the line is put
back. A mutation is *caught* when its tests fail, *survived* when they pass. The unmutated copy
runs every named test first: a failing baseline makes the answers meaningless, so the check
stops there. Not collected by pytest (it lives in bench/); bounded per mutation and overall.

    .venv/bin/python bench/mutation_check.py              # every mutation
    .venv/bin/python bench/mutation_check.py --only threshold-strict v-write-deleted
    .venv/bin/python bench/mutation_check.py --list
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutation:
    """Replace the one line holding ``old`` in ``path`` by ``new``; ``tests`` must then fail."""

    name: str
    claim: str  # the documented behaviour the mutation breaks
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


MUTATIONS = [
    Mutation("logprob-tempered", "a logprob is the log-softmax of the committing forward's logits",
             "dllm/engine/logprobs.py", "logp = kernels.log_softmax(self._logits)",
             "logp = kernels.log_softmax(self._logits / 2)", ("tests/serve/test_logprob_values.py",)),
    Mutation("threshold-strict", "threshold commits probability >= tau (Fast-dLLM v1, Dream)",
             "dllm/samplers/rules/threshold.py", "commit = inp.eligible & (prob >= self.tau)",
             "commit = inp.eligible & (prob > self.tau)", ("tests/samplers/test_threshold_tie.py",)),
    Mutation("low-confidence-tau-inclusive", "low_confidence's tau is strictly above (LLaDA2.0)",
             "dllm/samplers/rules/llada_topk.py", "above = inp.eligible & (inp.stats.prob > self.tau)",
             "above = inp.eligible & (inp.stats.prob >= self.tau)",
             ("tests/samplers/test_threshold_tie.py", "tests/samplers/test_official_loop_rules.py")),
    Mutation("entropy-threshold-strict", "entropy_threshold commits entropy <= tau (dParallel)",
             "dllm/samplers/rules/entropy_threshold.py",
             "return (inp.eligible & (ent <= self.tau)) | most_confident(-ent, inp.eligible)",
             "return (inp.eligible & (ent < self.tau)) | most_confident(-ent, inp.eligible)",
             ("tests/samplers/test_threshold_tie.py",)),
    Mutation("learn2pd-inclusive", "Learn2PD accepts sigmoid(score) > tau",
             "dllm/samplers/rules/learn2pd.py", "(torch.sigmoid(scores.float()) > self.tau)",
             "(torch.sigmoid(scores.float()) >= self.tau)", ("tests/samplers/test_threshold_tie.py",)),
    Mutation("v-write-deleted", "a cached forward stores its V beside its K",
             "dllm/models/layers.py", "v_buf[:, :, write_at : write_at + T] = v", "pass",
             ("tests/cache/test_fastdllm_compat.py",)),
    Mutation("freedave-accepts-nothing", "FreeDave accepts the drafts on the base rule's trajectory",
             "dllm/samplers/strategies/freedave.py", "accepted = 1 + ok.long().cumprod(-1).sum(-1)",
             "accepted = 1 + 0 * ok.long().cumprod(-1).sum(-1)",
             ("tests/strategies/test_freedave_lopa.py::test_freedave_equals_static_decoding",)),
    Mutation("ssd-walks-unverified", "SSD's walk moves only to the node one verified base step ahead",
             "dllm/samplers/strategies/ssd.py",
             "moves = same & (depth[None, :] == depth[:, None] + 1)[None] & open_[:, :, None]",
             "moves = (same | True) & (depth[None, :] == depth[:, None] + 1)[None] & open_[:, :, None]",
             ("tests/strategies/test_ssd.py::test_ssd_equals_stepwise_decoding[4-dual-llada]",)),
    Mutation("ssd-swap-noise-shifted", "an SSD tree node draws its row's noise at its own depth",
             "dllm/samplers/strategies/ssd.py", "ahead = state.row_step[rows] + depth.repeat(B)",
             "ahead = state.row_step[rows] + depth.repeat(B) + (torch.arange(M) >= self.num_drafts).long().repeat(B)",
             ("tests/strategies/test_ssd.py::test_ssd_is_lossless_when_sampling[T0.3-low_confidence-llada]",)),
    Mutation("editing-never-edits", "token editing rewrites positions whose forward token differs",
             "dllm/engine/decoding.py",
             "edit = editable & (stats.prob > self.config.edit_threshold) & (stats.token != window)",
             "edit = editable & (stats.prob > 1.0) & (stats.token != window)", ("tests/test_token_editing.py",)),
    Mutation("editing-past-the-end", "token editing never rewrites a row's fill past its end",
             "dllm/engine/decoding.py", "editable = decided & inside & self.runner.active[:, None]",
             "editable = decided & self.runner.active[:, None]",
             ("tests/test_token_editing.py::test_ragged_batch_equals_single_runs_under_every_cache",)),
    Mutation("likelihood-tempered", "lm-eval's loglikelihood is the model's log-softmax",
             "dllm/eval/likelihood.py", "logp = kernels.log_softmax(window)",
             "logp = kernels.log_softmax(window / 2)", ("tests/eval/test_lm_eval_model.py",)),
    Mutation("pipeline-one-block", "D2F's pipeline adds a block before the last one is full",
             "dllm/engine/pipeline.py", "& ~stop & (last >= self.add)).long()", "& ~stop & (last >= 1.0)).long()",
             ("tests/test_pipeline.py::test_trained_model_matches_d2f_loop",)),
    Mutation("stop-ids-decide-nothing", "generate stops a row in the round a stop id decides its text",
             "dllm/api/decided.py", "has_stops = bool(stops.strings or stops.token_ids)",
             "has_stops = bool(stops.strings)", ("tests/serve/test_decided_rows_nfe.py",)),
    Mutation("eos-at-max-tokens-missed", "an end-of-text at index max_tokens ends the text stop_at_eos's way",
             "dllm/api/decided.py", "answer[:, : max_tokens + 1]", "answer[:, : max_tokens]",
             ("tests/serve/test_decided_rows_nfe.py",)),
    Mutation("window-start-ignores-lead", "window_start counts a block-causal row's answer after its lead",
             "dllm/engine/decoding.py", "return max(state.bs - state.canvas.prompt_width - lead, 0)",
             "return max(state.bs - state.canvas.prompt_width, 0)",
             ("tests/test_lead_never_decoded.py::test_the_window_start_counts_a_rows_answer_after_its_lead",)),
    Mutation("widened-past-the-canvas", "an uncached block-causal forward is widened within the canvas",
             "dllm/runner/model_runner.py", "width = canvas_length(T, self.canvas.length)",
             "width = canvas_length(T, 1 << 30)", ("tests/runner/test_cuda_graphs.py",)),
    Mutation("margin-mean-takes-the-lead", "SchED / Prophet average the margin over the answer, not the lead",
             "dllm/samplers/stoppers/sched.py",
             "region = self.region(state, view) & view.seen & answer_region(state)",
             "region = self.region(state, view) & view.seen", ("tests/samplers/test_margin_exit_span.py",)),
    Mutation("prophet-window-from-the-region", "Prophet's start / length count from the answer start",
             "dllm/samplers/stoppers/prophet.py", "            idx = idx - state.lead[:, None]", "            pass",
             ("tests/samplers/test_margin_exit_span.py",)),
    Mutation("moe-ep-tile-unpinned", "batch-invariant MoE pins the row tile on the expert-parallel path too",
             "dllm/models/moe.py", "        xs = x2d.index_select(0, pairs // self.cfg.top_k)\n        tile = self.row_tile",
             "        xs = x2d.index_select(0, pairs // self.cfg.top_k)\n        tile = None",
             ("tests/models/test_batch_invariant_modules.py",)),
    Mutation("pipeline-stops-without-stop-at-eos", "D2F adds no block after an end-of-text only under stop_at_eos",
             "dllm/engine/pipeline.py", "stop = eos & state.config.stop_at_eos", "stop = eos",
             ("tests/test_pipeline.py::test_without_stop_at_eos_blocks_are_added_after_an_end_of_text",)),
    Mutation("choice-as-regex", "a choice constraint allows exactly its strings",
             "dllm/samplers/constraints/spec.py", '"|".join(re.escape(c) for c in self.choice)',
             '"|".join(c for c in self.choice)', ("tests/constraints/test_constraint_spec.py",)),
    # the parallel package and the OpenAI protocol layer (mutation audit, round 7)
    Mutation('o-bias-on-every-rank', "o_proj's bias is read by tensor rank 0 only (the all-reduce adds it once)",
             'dllm/parallel/tensor_plan.py', '(r"layers\\.\\d+\\.attn\\.o_proj\\.bias", FIRST_RANK),',
             '(r"layers\\.\\d+\\.attn\\.o_proj\\.bias", REPLICATED),', ('tests/parallel/test_tensor_plan_slices.py',)),
    Mutation('dp-deal-contiguous', 'data parallel deals prompts round-robin: copy g takes prompts g, g + G, ...',
             'dllm/bench/throughput.py', 'indices = list(range(layout.group_index, len(prompts), layout.groups))',
             'indices = list(range(len(prompts)))[layout.group_index * len(prompts) // layout.groups:(layout.group_index + 1) * len(prompts) // layout.groups]', ('tests/parallel/test_tp_commands.py::test_tp2_times_dp2_gives_one_process_tokens',)),
    Mutation('length-read-as-stop', 'an answer max_tokens cut has OpenAI finish_reason "length"',
             'dllm/serve/rows.py', 'if self.reason in ("eos", "stop"):\n            return "stop"',
             'if self.reason in ("eos", "stop", "length"):\n            return "stop"', ('tests/serve/test_stream_usage_chunks.py::test_a_chat_stream_is_role_deltas_finish_usage_then_done',)),
    Mutation('stream-without-done', 'a stream ends with data: [DONE]',
             'dllm/serve/app.py', '            yield writer.usage_chunk(session.rows, parsed.prompt_tokens)\n        yield DONE',
             '            yield writer.usage_chunk(session.rows, parsed.prompt_tokens)', ('tests/serve/test_stream_usage_chunks.py::test_a_chat_stream_is_role_deltas_finish_usage_then_done',)),
    Mutation('length-call-ends-tool-calls', 'calls read from an answer cut at max_tokens keep finish_reason "length"',
             'dllm/serve/tool_stream.py', 'reason == "stop" and choice.mode != "named"',
             'reason in ("stop", "length") and choice.mode != "named"', ('tests/serve/test_tool_calls.py::test_an_answer_cut_at_max_tokens_ends_length_after_whole_calls',)),
    Mutation('chat-bytes-latin1', "chat logprobs' bytes are the token's UTF-8 bytes",
             'dllm/serve/logprob_format.py', 'list(text.encode("utf-8", "replace"))',
             'list(text.encode("latin-1", "replace"))', ('tests/serve/test_logprob_values.py::test_chat_logprob_bytes_are_each_tokens_utf8',)),
    Mutation('include-usage-without-stream', 'stream_options without a stream is a 400',
             'dllm/serve/requests.py', '    if include_usage and not stream:',
             '    if False:', ('tests/serve/test_stream_usage_chunks.py::test_stream_options_without_a_stream_are_refused',)),
    Mutation('responses-completed-at-always', "a Responses answer's completed_at is null unless it completed",
             'dllm/serve/responses_api.py', '"completed_at": int(time.time()) if status == "completed" else None,',
             '"completed_at": int(time.time()),', ('tests/serve/test_responses_endpoint.py::test_max_output_tokens_cuts_the_answer_and_says_so',)),
    Mutation('responses-stream-options-without-stream', '/v1/responses refuses stream_options without stream=true',
             'dllm/serve/responses_api.py', '    if options is not None and body.get("stream") is not True:',
             '    if False:', ('tests/serve/test_responses_endpoint.py::test_what_is_not_served_is_a_400_naming_the_field_before_any_row',)),
    Mutation('developer-as-user', 'a Responses developer message is a system message',
             'dllm/serve/responses_api.py', '"developer": "system"}',
             '"developer": "user"}', ('tests/serve/test_responses_endpoint.py::test_a_developer_message_is_a_system_message',)),
    Mutation('n-max-exclusive', 'n may be 64',
             'dllm/serve/requests.py', 'not 1 <= n <= MAX_N:',
             'not 1 <= n < MAX_N:', ('tests/serve/test_requests.py::test_n_is_one_to_64_samples',)),
    Mutation('rows-cap-inclusive', 'a request of exactly max_rows_per_request rows is served',
             'dllm/serve/requests.py', 'if rows > limits.max_rows_per_request:',
             'if rows >= limits.max_rows_per_request:', ('tests/serve/test_requests.py::test_n_is_one_to_64_samples',)),
    Mutation('context-inclusive', 'a prompt and answer that fill the context exactly are served',
             'dllm/serve/requests.py', '        if total > context:',
             '        if total >= context:', ('tests/serve/test_requests.py::test_a_prompt_and_answer_that_fill_the_context_exactly_fit',)),
    Mutation('chars-cap-inclusive', 'a prompt of exactly the character cap is tokenized',
             'dllm/serve/requests.py', '        if chars > cap:',
             '        if chars >= cap:', ('tests/serve/test_requests.py::test_a_prompt_of_exactly_the_character_cap_is_tokenized',)),
    Mutation('chars-cap-one-more', 'the character cap is context x chars_per_token',
             'dllm/serve/limits.py', 'return context * self.chars_per_token',
             'return (context + 1) * self.chars_per_token', ('tests/serve/test_requests.py::test_a_prompt_of_exactly_the_character_cap_is_tokenized',)),
    Mutation('top-logprobs-max-exclusive', 'top_logprobs may be 20',
             'dllm/serve/requests.py', 'not 0 <= value <= MAX_TOP_LOGPROBS:',
             'not 0 <= value < MAX_TOP_LOGPROBS:', ('tests/serve/test_requests.py::test_logprobs_and_seed_at_their_bounds',)),
    Mutation('seed-bound-inclusive', 'a seed is below 2**63',
             'dllm/serve/requests.py', 'not 0 <= seed < 2**63:',
             'not 0 <= seed <= 2**63:', ('tests/serve/test_requests.py::test_logprobs_and_seed_at_their_bounds',)),
    Mutation('top-logprobs-without-logprobs', "chat's top_logprobs needs logprobs=true",
             'dllm/serve/requests.py', '            if top is not None:\n                raise RequestError("top_logprobs needs logprobs=true"',
             '            if False:\n                raise RequestError("top_logprobs needs logprobs=true"', ('tests/serve/test_requests.py::test_logprobs_and_seed_at_their_bounds',)),
    Mutation('chat-logprobs-true-top-none', "chat's logprobs=true alone gives 0 alternatives",
             'dllm/serve/requests.py', 'value, field = (0 if top is None else top), "top_logprobs"',
             'value, field = (1 if top is None else top), "top_logprobs"', ('tests/serve/test_requests.py::test_logprobs_and_seed_at_their_bounds',)),
    Mutation('parts-joined-by-space', "a message's text parts join with newlines (as vLLM)",
             'dllm/serve/requests.py', '    return "\\n".join(texts)\n\n\ndef _tools',
             '    return " ".join(texts)\n\n\ndef _tools', ('tests/serve/test_requests.py::test_a_messages_text_parts_are_joined_by_newlines',)),
    Mutation('token-prompt-text-skips-special', 'a token-id prompt echoes its special tokens',
             'dllm/serve/requests.py', 'texts.append(model.tokenizer.decode(row, skip_special_tokens=False))',
             'texts.append(model.tokenizer.decode(row, skip_special_tokens=True))', ('tests/serve/test_requests.py::test_a_prompt_of_token_ids_echoes_its_special_tokens',)),
    Mutation('content-length-inclusive', 'a body of exactly max_body_bytes is read (Content-Length)',
             'dllm/serve/guards.py', '        if length > self.limits.max_body_bytes:',
             '        if length >= self.limits.max_body_bytes:', ('tests/serve/test_server_limits.py::test_a_body_of_exactly_the_limit_is_read',)),
    Mutation('streamed-body-inclusive', 'a body of exactly max_body_bytes is read (as it arrives)',
             'dllm/serve/guards.py', '                    if size > self.limits.max_body_bytes:',
             '                    if size >= self.limits.max_body_bytes:', ('tests/serve/test_server_limits.py::test_a_body_of_exactly_the_limit_is_read',)),
    Mutation('required-arguments-any', 'a required answer whose arguments are not an object is no call',
             'dllm/api/tools.py', 'and isinstance(item.get("arguments"), dict)):',
             '):', ('tests/serve/test_tool_calls.py::test_answers_read_back_as_content_and_calls',)),
    Mutation('take-logprobs-early', "a streamed token's logprob goes out with its text, not before",
             'dllm/serve/rows.py', 'len(self.decode(self.cut.ids[: end + 1])) <= self.sent:',
             'len(self.decode(self.cut.ids[: end + 1])) <= self.sent + 1:', ('tests/serve/test_rows.py::test_logprobs_go_out_with_their_tokens_text',)),
    Mutation('echo-of-wrong-prompt', 'choice p * n + j echoes prompt p',
             'dllm/serve/app.py', 'return parsed.prompt_texts[index // parsed.n] if parsed.echo else ""',
             'return parsed.prompt_texts[index % len(parsed.prompt_texts)] if parsed.echo else ""', ('tests/serve/test_server_openai.py::test_echo_and_prompt_lists',)),
    Mutation('error-type-429', "a 429's error type is rate_limit_exceeded (OpenAI's)",
             'dllm/serve/responses.py', '{401: "authentication_error", 429: "rate_limit_exceeded"',
             '{401: "authentication_error", 429: "invalid_request_error"', ('tests/serve/test_server_openai.py::test_queue_full_is_429_with_retry_after',)),

    Mutation("ipv6-host-with-port", "a loopback server answers Host [::1]:PORT (the brackets and port dropped)",
             "dllm/serve/guards.py", '        return host[1 : host.find("]")] if "]" in host else host', "        return host",
             ("tests/serve/test_server_access.py::test_loopback_server_refuses_foreign_hosts",)),
    Mutation("order-keys-zero-split", "the nucleus search's order keys invert exactly (-0.0 just below +0.0)",
             "dllm/parallel/vocab_shard.py", "return torch.where(bits >= 0, bits, -(bits & 0x7FFFFFFF) - 1)",
             "return torch.where(bits >= 0, bits, -(bits & 0x7FFFFFFF))",
             ("tests/parallel/test_tensor_parallel.py::test_nucleus_search_keys_order_floats_and_invert",)),
    Mutation("key-any-scheme", "the API key counts only as a Bearer token",
             "dllm/serve/guards.py", 'if scheme.lower() != "bearer" or not hmac.compare_digest', "if not hmac.compare_digest",
             ("tests/serve/test_server_access.py::test_api_key_is_required",)),

    # lm-eval model and likelihoods (mutation audit, round 5)
    Mutation("likelihood-own-width", "a likelihood row is charged its forward's padded width",
             "dllm/eval/likelihood.py", "token_forwards[r] += width", "token_forwards[r] += sum(map(len, pairs[r]))",
             ("tests/eval/test_likelihood_accounting.py",)),
    Mutation("likelihood-whole-forward-time", "a likelihood row is charged its share of its forward's time",
             "dllm/eval/likelihood.py", "seconds[r] += elapsed / len(chunk)", "seconds[r] += elapsed",
             ("tests/eval/test_likelihood_accounting.py",)),
    Mutation("likelihood-biased-stderr", "a likelihood's stderr is the (n - 1) spread over sqrt(mc_num)",
             "dllm/eval/likelihood.py", "d.std(unbiased=True)", "d.std(unbiased=False)",
             ("tests/eval/test_likelihood_accounting.py",)),
    Mutation("continuation-tokenized-alone", "a continuation is what the joint text adds (lm-eval's split)",
             "dllm/eval/lm_eval.py", "continuation_ids = whole[len(context_ids):]",
             "continuation_ids = self.tok_encode(continuation)", ("tests/eval/test_lm_eval_requests.py",)),
    Mutation("answer-keeps-end-of-text", "an answer's text stops before its end-of-text",
             "dllm/eval/lm_eval.py", "text_ids = ids[:-1] if ids and ids[-1] in eos else ids", "text_ids = ids",
             ("tests/eval/test_lm_eval_requests.py",)),
    Mutation("record-nfe-without-greedy", "a likelihood record's NFE adds the greedy check's forwards",
             "dllm/eval/lm_eval.py", '"nfe": est.nfe + greedy_nfe,', '"nfe": est.nfe,',
             ("tests/eval/test_lm_eval_requests.py",)),
    Mutation("speed-sums-earlier-runs", "dllm_speed.json sums this run's requests only",
             "dllm/eval/records.py", 'speed_summary([r for r in self._all_records() if r["key"] in keys])',
             "speed_summary(self._all_records())", ("tests/eval/test_lm_eval_records.py",)),
    Mutation("fingerprint-without-mc-num", "records of another mc_num never answer a rerun",
             "dllm/eval/lm_eval.py", '"mc_num": self.options.mc_num, "greedy_check"', '"greedy_check"',
             ("tests/eval/test_lm_eval_records.py",)),
    # checkpoint loading (mutation audit, round 5)
    Mutation("llada-rows-from-vocab-size", "LLaDA's embedding rows are embedding_size (the padded vocabulary)",
             "dllm/models/llada.py", 'vocab_size=raw.get("embedding_size") or raw["vocab_size"],',
             'vocab_size=raw["vocab_size"],', ("tests/models/test_config_keys.py",)),
    Mutation("llada2-norm-from-config", "LLaDA2's gate renormalises whenever top_k > 1",
             "dllm/models/llada2_moe.py", "norm_topk=top_k > 1,", 'norm_topk=bool(raw.get("norm_topk_prob", False)),',
             ("tests/models/test_config_keys.py",)),
    Mutation("llada-moe-freq-inverted", "LLaDA-MoE's moe_layer_freq marks an MoE layer with 1",
             "dllm/models/llada_moe.py", "moe_layers = tuple(i for i, f in enumerate(freq) if f)",
             "moe_layers = tuple(i for i, f in enumerate(freq) if not f) or tuple(range(n_layers))",
             ("tests/models/test_config_keys.py",)),
    Mutation("gemma-last-layer-sliding", "DiffusionGemma's last layer is full attention, as transformers forces",
             "dllm/models/diffusion_gemma.py", 'layer_types[-1] = "full_attention"', "pass",
             ("tests/models/test_config_keys.py",)),
    Mutation("tied-head-copied", "a tied head is the embedding itself, held once",
             "dllm/models/loading.py", 'state["lm_head.weight"] = state["embed.weight"]',
             'state["lm_head.weight"] = state["embed.weight"].clone()', ("tests/models/test_tied_head.py",)),
    Mutation("unindexed-first-shard-only", "shards without an index are all read",
             "dllm/models/loading.py", "for file in files:\n        with _open_safetensors(file) as f:",
             "for file in files[:1]:\n        with _open_safetensors(file) as f:",
             ("tests/models/test_shards_without_index.py",)),
    # kernels, the CUDA graph runner and compile (mutation audit, round 6: GPU-path code whose CPU tests are its guard)
    Mutation("linear-kernel-tf32", "the batch-invariant linear multiplies float32 in IEEE precision, not TF32",
             "dllm/kernels/invariant_matmul.py", "IEEE=x.dtype == torch.float32, num_warps=4,", "IEEE=False, num_warps=4,",
             ("tests/kernels/test_launch_schedules.py",)),
    Mutation("attention-kernel-tf32", "the batch-invariant attention multiplies float32 in IEEE precision",
             "dllm/kernels/invariant_attention.py", "IEEE=q.dtype == torch.float32, num_warps=4,", "IEEE=False, num_warps=4,",
             ("tests/kernels/test_launch_schedules.py",)),
    Mutation("grouped-kernel-tf32", "the grouped expert product multiplies float32 in IEEE precision",
             "dllm/kernels/grouped_matmul.py", "IEEE=x.dtype == torch.float32, num_warps=4,", "IEEE=False, num_warps=4,",
             ("tests/kernels/test_launch_schedules.py",)),
    Mutation("norm-chunk-by-rows", "RMSNorm's chunk is a function of D only, never of the row count",
             "dllm/kernels/rms_norm.py", "BLOCK_D=min(MAX_BLOCK_D, triton.next_power_of_2(D)),",
             "BLOCK_D=min(MAX_BLOCK_D if x2.shape[0] > 1 else 512, triton.next_power_of_2(D)),",
             ("tests/kernels/test_launch_schedules.py",)),
    Mutation("log-softmax-chunk-by-rows", "log-softmax's chunk is a function of V only, never of the row count",
             "dllm/kernels/log_softmax.py", "BLOCK_V=min(MAX_BLOCK_V, triton.next_power_of_2(V)), num_warps=4)",
             "BLOCK_V=min(MAX_BLOCK_V if x2.shape[0] > 1 else 2048, triton.next_power_of_2(V)), num_warps=4)",
             ("tests/kernels/test_launch_schedules.py",)),
    Mutation("log-softmax-tail-dropped", "log-softmax sums every logit of a row, the masked tail chunk's last too",
             "dllm/kernels/log_softmax.py",
             "x = tl.load(x_ptr + row * stride_x + cols, mask=cols < V, other=neg_inf).to(tl.float32)",
             "x = tl.load(x_ptr + row * stride_x + cols, mask=cols < V - 1, other=neg_inf).to(tl.float32)",
             ("tests/kernels/test_batch_invariant.py::test_triton_kernels_are_row_invariant_interpreted",)),
    Mutation("norm-rounds-once", "the RMSNorm kernel rounds the normed row to x's dtype before the weight, as RMSNorm",
             "dllm/kernels/rms_norm.py", "y = (x.to(tl.float32) * rstd).to(x.dtype).to(tl.float32)",
             "y = x.to(tl.float32) * rstd",
             ("tests/kernels/test_batch_invariant.py::test_triton_kernels_are_row_invariant_interpreted",)),
    Mutation("sampling-fma-fused", "x + T * g rounds as torch rounds it (the sampling kernel launches without FMA)",
             "dllm/kernels/confidence_stats.py", "num_warps=8 if block >= 2048 else 4, enable_fp_fusion=False,",
             "num_warps=8 if block >= 2048 else 4, enable_fp_fusion=True,", ("tests/kernels/test_launch_schedules.py",)),
    Mutation("logprobs-bypass-dispatch", "a decode's logprobs go through kernels.log_softmax (one program a row on CUDA)",
             "dllm/engine/logprobs.py", "logp = kernels.log_softmax(self._logits)",
             "logp = self._logits.float().log_softmax(-1)", ("tests/kernels/test_log_softmax_callers.py",)),
    Mutation("likelihood-bypass-dispatch", "the likelihood eval's logprobs go through kernels.log_softmax",
             "dllm/eval/likelihood.py", "logp = kernels.log_softmax(window)", "logp = window.float().log_softmax(-1)",
             ("tests/kernels/test_log_softmax_callers.py",)),
    Mutation("graphs-uncached-unbucketed", "an uncached forward replays in its batch bucket's graph",
             "dllm/runner/graphs.py", "rows = bucket(N) if slot is None else slot.layers[0][0].shape[0]",
             "rows = N if slot is None else slot.layers[0][0].shape[0]", ("tests/runner/test_graph_runner_bookkeeping.py",)),
    Mutation("graphs-padding-rows-zeros", "a graph's padding rows hold the first row's inputs",
             "dllm/runner/graphs.py", "out = x[:1].repeat(rows, *([1] * (x.dim() - 1)))",
             "out = torch.zeros_like(x[:1]).repeat(rows, *([1] * (x.dim() - 1)))",
             ("tests/runner/test_graph_runner_bookkeeping.py",)),
    Mutation("graphs-logits-not-copied", "a replay's logits are a copy the next replay leaves alone",
             "dllm/runner/graphs.py", "return out[:rows].clone()", "return out[:rows]",
             ("tests/runner/test_graph_runner_bookkeeping.py",)),
    Mutation("graphs-mask-unkeyed", "masked and unmasked keys of one shape are two graphs",
             "dllm/runner/graphs.py", "key_ends=ends, masked=valid is not None,", "key_ends=ends, masked=True,",
             ("tests/runner/test_graph_runner_bookkeeping.py",)),
    Mutation("graphs-slot-not-zeroed", "a K/V slot leased again is zeroed, as a fresh allocation",
             "dllm/runner/graphs.py", "out.append((k[:batch].zero_(), v[:batch].zero_()))",
             "out.append((k[:batch], v[:batch]))", ("tests/runner/test_graph_runner_bookkeeping.py",)),
    Mutation("graphs-evict-newest-slot", "past max_slots the least recently leased free slot goes",
             "dllm/runner/graphs.py", "_, shape, slot = min(free, key=lambda item: item[0])",
             "_, shape, slot = max(free, key=lambda item: item[0])", ("tests/runner/test_graph_runner_bookkeeping.py",)),
    Mutation("graphs-replay-not-recent", "past max_graphs the least recently replayed graph goes",
             "dllm/runner/graphs.py",
             "            self.graphs.move_to_end(key)\n            captured.tokens[:N].copy_(tokens)\n"
             "            captured.positions[:N].copy_(positions)\n            if valid",
             "            pass\n            captured.tokens[:N].copy_(tokens)\n"
             "            captured.positions[:N].copy_(positions)\n            if valid",
             ("tests/runner/test_graph_runner_bookkeeping.py",)),
    Mutation("graphs-logits-buffers-kept", "a dropped graph's logits buffer goes with it",
             "dllm/runner/graphs.py", "            self._prune_outputs()\n        return captured",
             "            pass\n        return captured", ("tests/runner/test_graph_runner_bookkeeping.py",)),
    Mutation("graphs-oom-keeps-idle-slots", "a slot that does not fit frees the idle slots first",
             "dllm/runner/graphs.py", "                while self._evict_slot():\n                    pass",
             "                if False:\n                    pass", ("tests/runner/test_graph_runner_bookkeeping.py",)),
    Mutation("graphs-capture-unlocked", "a capture holds CAPTURE_LOCK",
             "dllm/runner/graphs.py", "            with CAPTURE_LOCK:\n                graph = self.backend(",
             "            if True:\n                graph = self.backend(", ("tests/runner/test_graph_runner_bookkeeping.py",)),
    Mutation("graphs-window-past-slot", "a window written past the slot's keys is refused",
             "dllm/runner/graphs.py", "        if write_at + T > keys:", "        if False:",
             ("tests/runner/test_graph_runner_bookkeeping.py",)),
    Mutation("head-rows-on-gpu", "the LM head selects the read rows on a CPU only",
             "dllm/runner/model_runner.py", 'return device.type == "cpu"', "return True",
             ("tests/runner/test_graph_runner_bookkeeping.py",)),
    Mutation("compiled-every-call", "one compiled wrapper per model, reused by every decode",
             "dllm/runner/compiled.py", "        _COMPILED[model] = compiled", "        pass",
             ("tests/runner/test_compiled_wrapper.py",)),
    Mutation("cache-never-marked-static", "a compiled cached forward marks its K/V static",
             "dllm/runner/model_runner.py", "            mark_static(cache)", "            pass",
             ("tests/runner/test_compiled_wrapper.py",)),
    # dllm/api and the cache modes' bookkeeping (mutation audit, round 8)
    Mutation('end-token-past-max-tokens', 'token_ids keep at most max_tokens ids (no end-of-text past the cut)',
             'dllm/api/outputs.py', '(request.max_tokens is None or after < request.max_tokens)',
             '(request.max_tokens is None or after <= request.max_tokens)', ('tests/api/test_end_row_kept_ids.py',)),
    Mutation('end-token-after-stop-string', 'an id after a stop string is not kept (the row ended at the string)',
             'dllm/api/outputs.py', 'and decode(kept) == stopped.text and',
             'and True and', ('tests/api/test_end_row_kept_ids.py',)),
    Mutation('stop-id-bool', 'a bool is no stop token id',
             'dllm/api/stops.py', 'if isinstance(t, bool) or not isinstance(t, numbers.Integral):',
             'if not isinstance(t, numbers.Integral):', ('tests/api/test_output_request_values.py',)),
    Mutation('logprobs-bool', 'a bool is no logprobs count',
             'dllm/api/request.py', 'if logprobs is not None and (isinstance(logprobs, bool) or not isinstance(logprobs, numbers.Integral)):',
             'if logprobs is not None and (not isinstance(logprobs, numbers.Integral)):', ('tests/api/test_output_request_values.py',)),
    Mutation('max-tokens-zero', 'max_tokens is a positive int (0 refused)',
             'dllm/api/request.py', 'if max_tokens is not None and max_tokens <= 0:',
             'if max_tokens is not None and max_tokens < 0:', ('tests/api/test_output_request_values.py',)),
    Mutation('steps-not-following-length', 'one token per step stays one per step when max_tokens changes the length',
             'dllm/api/request.py', '            values["steps"] = None  # one token per step',
             '            pass', ('tests/api/test_output_request_values.py',)),
    Mutation('stream-tokens-whole-answer', "stream's last stats count generate's kept tokens",
             'dllm/api/streaming.py', '"tokens": len(kept), "tpf": len(kept) / max(nfe, 1),',
             '"tokens": len(answer), "tpf": len(kept) / max(nfe, 1),', ('tests/test_stream_last_update.py::test_last_update_counts_and_logprobs_are_generates',)),
    Mutation('stream-logprobs-without-end', "stream's last update has a logprob per kept id, the ending stop id's too",
             'dllm/api/streaming.py', 'result.logprobs.read(0, 0, len(kept), request.logprobs)',
             'result.logprobs.read(0, 0, len(cut.ids), request.logprobs)', ('tests/test_stream_last_update.py::test_last_update_counts_and_logprobs_are_generates',)),
    Mutation('stream-editing-stops-rows', 'an editing stream decodes on after a stop, as generate (same forwards)',
             'dllm/api/streaming.py', 'if reason in ("stop", "length") and not editing:',
             'if reason in ("stop", "length"):', ('tests/test_stream_last_update.py::test_an_editing_stream_decodes_on_after_an_early_stop',)),
    Mutation('in-flight-negative-start', 'spans in flight start at the answer, never inside the lead',
             'dllm/api/streaming.py', 'return [(max(s - lead, 0), e - lead) for s, e in spans if e > lead]',
             'return [(s - lead, e - lead) for s, e in spans if e > lead]', ('tests/test_stream_last_update.py::test_spans_in_flight_start_at_the_answer',)),
    Mutation('token-id-vocab-inclusive', 'token id vocab_size is outside the vocabulary',
             'dllm/api/inputs.py', '            if not 0 <= token < vocab_size:',
             '            if not 0 <= token <= vocab_size:', ('tests/api/test_prompt_shapes.py',)),
    Mutation('token-ids-empty-prompt', 'an empty prompt list is an empty chat, not token ids',
             'dllm/api/inputs.py', 'return (isinstance(value, (list, tuple)) and len(value) > 0',
             'return (isinstance(value, (list, tuple)) and len(value) >= 0', ('tests/api/test_prompt_shapes.py',)),
    Mutation('null-content-kept', 'a turn that only called tools reaches the template with empty text',
             'dllm/api/tools.py', '            message["content"] = ""',
             '            pass', ('tests/serve/test_tool_template_inputs.py',)),
    Mutation('template-format-stale', "a tokenizer's tool form is read again when its template changes",
             'dllm/api/tools.py', 'if cached is not None and cached[0] == tokenizer.chat_template:',
             'if cached is not None:', ('tests/serve/test_tool_template_inputs.py',)),
    Mutation('mistral-piece-without-args', 'a Mistral call without [ARGS] leaves every call content (all or nothing)',
             'dllm/api/tool_parsers.py', '        if not found:\n            return None',
             '        if not found:\n            continue', ('tests/serve/test_tool_parsers_all_or_nothing.py',)),
    Mutation('from-layer-last-refused', "the adaptive cache's from_layer is below n_layers",
             'dllm/cache/adaptive.py', 'if n_layers is not None and self.from_layer is not None and self.from_layer >= n_layers:',
             'if n_layers is not None and self.from_layer is not None and self.from_layer > n_layers:', ('tests/cache/test_adaptive_option_bounds.py',)),
    Mutation('exact-end-never-advances', 'a block-causal refresh starts at the finished model block, not at 0',
             'dllm/cache/block.py', '                self.exact_end = block_start',
             '                pass', ('tests/cache/test_block_causal_refresh_costs.py',)),
    Mutation('block-causal-refresh-from-0', "a block-causal refresh forwards from the exact K/V's end",
             'dllm/cache/block.py', 'start = min(self.exact_end, outer_bs - shift) if block_causal else 0',
             'start = 0', ('tests/cache/test_block_causal_refresh_costs.py',)),
    Mutation('scope-prefix-whole', 'the adaptive "prefix" scope stops at the block\'s end',
             'dllm/cache/adaptive.py', '"prefix": [(0, be)],',
             '"prefix": [(0, end)],', ('tests/cache/test_adaptive_scope_and_peak.py::test_the_prefix_scope_stops_at_the_blocks_end',)),
    Mutation('adaptive-peak-without-copy', "the adaptive cache's peak counts the candidates' buffer copies",
             'dllm/cache/adaptive.py', '            held += self._held(buffers)',
             '            pass', ('tests/cache/test_adaptive_scope_and_peak.py::test_the_peak_counts_the_candidates_copy',)),
    Mutation('deciding-unshifted', 'select=read scores the queries whose logits decide a mask (shifted: the one before it)',
             'dllm/cache/read_refresh.py', 'deciding[:, : W - shift] = tokens[:, q_lo + shift : be] == model.mask_token_id',
             'deciding[:, : W - shift] = tokens[:, q_lo : be - shift] == model.mask_token_id', ('tests/cache/test_read_refresh_deciding.py',)),
    Mutation('cover-takes-unread', 'select=read never refreshes a key of no mass',
             'dllm/cache/read_refresh.py', 'take = (before < cover * mass.sum(-1, keepdim=True)) & (ordered > 0)',
             'take = (before < cover * mass.sum(-1, keepdim=True))', ('tests/cache/test_read_refresh_covering.py',)),
    Mutation('cover-inclusive', 'select=read stops once cover is reached',
             'dllm/cache/read_refresh.py', 'take = (before < cover * mass.sum(-1, keepdim=True)) & (ordered > 0)',
             'take = (before <= cover * mass.sum(-1, keepdim=True)) & (ordered > 0)', ('tests/cache/test_read_refresh_covering.py',)),
    Mutation('most-floor', 'select=read refreshes up to ceil(most x candidates)',
             'dllm/cache/read_refresh.py', '< torch.ceil(candidates.sum(-1, keepdim=True) * most)',
             '< torch.floor(candidates.sum(-1, keepdim=True) * most)', ('tests/cache/test_read_refresh_covering.py',)),
    Mutation('ends-without-shortest', "each model block of a prompt is a stored block (answer-origin's short first too)",
             'dllm/cache/prompt_store.py', 'return sorted({length - k * self.size for k in range(length // self.size + 1)} - {0})',
             'return sorted({length - k * self.size for k in range(length // self.size)} - {0})', ('tests/cache/test_prompt_store_edges.py',)),
    Mutation('store-block-at-bound-refused', 'a prompt block of exactly max_bytes is stored',
             'dllm/cache/prompt_store.py', 'if digest in self._blocks or block.nbytes > self.max_bytes:',
             'if digest in self._blocks or block.nbytes >= self.max_bytes:', ('tests/cache/test_prompt_store_edges.py',)),
    Mutation('match-touches-first-last', "a lookup leaves a chain's first block the most recent",
             'dllm/cache/prompt_store.py', '            for digest in reversed(digests[: len(found)]):  # deepest first',
             '            for digest in digests[: len(found)]:  # deepest first', ('tests/cache/test_prompt_store_edges.py',)),
    Mutation('attach-zero-bytes', 'a prompt store of 0 bytes is off',
             'dllm/cache/prompt_store.py', '    if store is None or store.max_bytes == 0:',
             '    if store is None:', ('tests/cache/test_prompt_store_edges.py',)),
    Mutation('d2f-prompt-stored', 'a D2F model (one prompt block) never uses the prompt store',
             'dllm/cache/prompt_store.py', 'if model.attention != "block_causal" or model.config.block_origin == "prompt":',
             'if model.attention != "block_causal":', ('tests/cache/test_prompt_store_edges.py',)),
    Mutation('computed-counts-reused', 'a prompt token counts once, reused or computed',
             'dllm/cache/prompt_store.py', 'tokens_computed=sum(lengths) - tokens_reused)',
             'tokens_computed=sum(lengths))', ('tests/cache/test_prompt_store_edges.py',)),
    Mutation('attach-after-forward', 'the prompt store is attached before the first forward or refused',
             'dllm/cache/prompt_store.py', '    if cache.kv is not None:\n        raise RuntimeError',
             '    if False:\n        raise RuntimeError', ('tests/cache/test_prompt_store_edges.py',)),
    Mutation('encoder-peak-k-only', 'cache="encoder" reports its prefix\'s keys and values as its peak',
             'dllm/cache/encoder_prefix.py', 'sum(k.numel() * k.element_size() * 2 for k in self.store.keys)',
             'sum(k.numel() * k.element_size() for k in self.store.keys)', ('tests/strategies/test_encoder_prefix_peak.py',)),
    Mutation('window-retrigger', "select=window chooses a drifted row's tokens once",
             'dllm/cache/adaptive.py', 'trigger = torch.where((trigger == n_layers) & drifted, i, trigger)',
             'trigger = torch.where(drifted, i, trigger)', ('tests/cache/test_adaptive_choice_once.py',)),
    # dllm/engine and dllm/cli (mutation audit, round 9)
    Mutation('seed-max-inclusive', 'a seed is below 2**63',
             'dllm/engine/config.py', 'if not 0 <= self.seed < 2**63:',
             'if not 0 <= self.seed <= 2**63:', ('tests/test_config_refusal_edges.py',)),
    Mutation('gen-length-zero-ok', 'gen_length 0 is refused as gen_length',
             'dllm/engine/config.py', 'if self.gen_length <= 0:',
             'if self.gen_length < 0:', ('tests/test_config_refusal_edges.py',)),
    Mutation('temperature-negative-ok', 'temperature must be >= 0',
             'dllm/engine/config.py', 'if self.temperature < 0:',
             'if False:', ('tests/test_config_refusal_edges.py',)),
    Mutation('top-p-zero-ok', 'top_p is in (0, 1]',
             'dllm/engine/config.py', 'not 0 < self.top_p <= 1:',
             'not 0 <= self.top_p <= 1:', ('tests/test_config_refusal_edges.py',)),
    Mutation('top-k-zero-ok', 'top_k is positive',
             'dllm/engine/config.py', 'if self.top_k is not None and self.top_k <= 0:',
             'if self.top_k is not None and self.top_k < 0:', ('tests/test_config_refusal_edges.py',)),
    Mutation('memory-budget-zero-ok', 'memory_budget_mb is positive',
             'dllm/engine/config.py', 'if self.memory_budget_mb is not None and self.memory_budget_mb <= 0:',
             'if self.memory_budget_mb is not None and self.memory_budget_mb < 0:', ('tests/test_config_refusal_edges.py',)),
    Mutation('edit-threshold-one-ok', 'edit_threshold is a probability in [0, 1)',
             'dllm/engine/config.py', 'not 0 <= self.edit_threshold < 1:',
             'not 0 <= self.edit_threshold <= 1:', ('tests/test_config_refusal_edges.py',)),
    Mutation('edit-threshold-zero-refused', 'edit_threshold 0 is taken',
             'dllm/engine/config.py', 'not 0 <= self.edit_threshold < 1:',
             'not 0 < self.edit_threshold < 1:', ('tests/test_config_refusal_edges.py',)),
    Mutation('max-post-steps-zero-refused', 'max_post_steps may be 0',
             'dllm/engine/config.py', 'if self.max_post_steps < 0:',
             'if self.max_post_steps <= 0:', ('tests/test_config_refusal_edges.py',)),
    Mutation('cfg-negative-ok', 'cfg_scale must be >= 0',
             'dllm/engine/config.py', 'if self.cfg_scale < 0:',
             'if False:', ('tests/test_config_refusal_edges.py',)),
    Mutation('graphs-and-compile', 'cuda_graphs and compile are exclusive',
             'dllm/engine/config.py', 'if self.cuda_graphs and self.compile:',
             'if False:', ('tests/test_config_refusal_edges.py',)),
    Mutation('graphs-and-adaptive', 'cuda_graphs does not run with the adaptive cache',
             'dllm/engine/config.py', 'if self.cuda_graphs and self.cache == "adaptive":',
             'if False:', ('tests/test_config_refusal_edges.py',)),
    Mutation('sub-block-zero-ok', 'a sub-block of 0 is refused',
             'dllm/engine/config.py', 'self.sub_block_length <= 0 or self.block_length % self.sub_block_length',
             'self.sub_block_length < 0 or self.block_length % self.sub_block_length', ('tests/test_config_refusal_edges.py',)),
    Mutation('sub-block-not-dividing', 'sub_block_length must divide block_length',
             'dllm/engine/config.py', 'self.sub_block_length <= 0 or self.block_length % self.sub_block_length',
             'self.sub_block_length <= 0', ('tests/test_config_refusal_edges.py',)),
    Mutation('steps-sub-windows-unchecked', 'steps are a multiple of the number of sub-blocks',
             'dllm/engine/config.py', '        if self.steps % self.num_windows:',
             '        if False:', ('tests/test_config_refusal_edges.py',)),
    Mutation('window-is-block', 'the decision window is the sub-block when set',
             'dllm/engine/config.py', 'return self.sub_block_length or self.block_length',
             'return self.block_length', ('tests/test_config_refusal_edges.py',)),
    Mutation('cache-options-no-sub', 'the cache is told the sub-block when set',
             'dllm/engine/config.py', '            options["sub_block_length"] = self.sub_block_length',
             '            pass', ('tests/test_config_refusal_edges.py',)),
    Mutation('cache-options-block-overrides', "the cache is told the config's block over cache_args'",
             'dllm/engine/config.py', 'options = {**self.cache_args, "block_length": self.block_length}',
             'options = {"block_length": self.block_length, **self.cache_args}', ('tests/test_config_refusal_edges.py',)),
    Mutation('set-model-fit-skipped', '/set refuses what the model cannot decode at once, not at the next turn',
             'dllm/cli/chat_settings.py', '            check_model_fit(self.model, new.config())',
             '            pass', ('tests/test_chat_set_model_checks.py',)),
    Mutation('length-setting-gen', "chat names what sets the answer's length as typed (max-tokens=N)",
             'dllm/cli/chat_settings.py', '        if self.max_tokens is not None:\n            return f"max-tokens',
             '        if False:\n            return f"max-tokens', ('tests/test_chat_set_model_checks.py',)),
    Mutation('show-wrap-off-by', '/show wraps at its width',
             'dllm/cli/chat_settings.py', 'if lines[-1] and len(lines[-1]) + 2 + len(item) > width:',
             'if lines[-1] and len(lines[-1]) + len(item) > width:', ('tests/test_chat_set_model_checks.py',)),
    Mutation('default-block-on-uniform', "chat keeps a uniform-state model's canvas as its block over the default 32",
             'dllm/cli/chat_settings.py', 'if self.default_block is not None and "block_length" not in self.options and canvas_length(self.model) is None:',
             'if self.default_block is not None and "block_length" not in self.options:', ('tests/test_chat_set_model_checks.py::test_a_uniform_state_models_canvas_stays_the_block_over_the_default_one',)),
    Mutation('longest-single-block-rounded', "a single block's longest answer follows the answer's length",
             'dllm/cli/chat_context.py', '        return max(room, 0)\n    return',
             '        return max(room, 0) // config.block_length * config.block_length\n    return', ('tests/test_chat_context_edges.py',)),
    Mutation('longest-blocks-unrounded', "fixed blocks' longest answer is whole blocks",
             'dllm/cli/chat_context.py', '    return max(room, 0) // config.block_length * config.block_length',
             '    return max(room, 0)', ('tests/test_chat_context_edges.py',)),
    Mutation('room-inclusive', 'an answer that leaves one token for a message is taken',
             'dllm/cli/chat_context.py', 'if config.gen_length + template < context:',
             'if config.gen_length + template <= context:', ('tests/test_chat_context_edges.py',)),
    Mutation('room-minus-one-dropped', 'the longest answer named leaves a token for the message',
             'dllm/cli/chat_context.py', 'longest = longest_answer(model, config, context - template - 1)',
             'longest = longest_answer(model, config, context - template)', ('tests/test_chat_context_edges.py',)),
    Mutation('system-check-dropped', 'a system message that leaves no room is named (shorten --system)',
             'dllm/cli/chat_context.py', 'if system and template + 2 > context:',
             'if False:', ('tests/test_chat_context_edges.py',)),
    Mutation('fits-exclusive', 'a conversation that fills the context exactly is decoded',
             'dllm/cli/chat_context.py', 'if prompt + config.gen_length <= context:',
             'if prompt + config.gen_length < context:', ('tests/test_chat_context_edges.py',)),
    Mutation('template-without-system', "the system message counts in the chat's room",
             'dllm/cli/chat_context.py', 'lead = [{"role": "system", "content": system}] if system else []',
             'lead = []', ('tests/test_chat_context_edges.py',)),
    Mutation('info-prefixed', 'an INFO line is written as is (a stats line reads like output)',
             'dllm/cli/output.py', '        if record.levelno == logging.INFO:\n            return message',
             '        if False:\n            return message', ('tests/test_cli_log_lines.py',)),
    Mutation('out-unwritable-ok', 'an --out without write permission is refused before any work',
             'dllm/cli/output.py', 'if not os.access(existing, os.W_OK | os.X_OK):',
             'if False:', ('tests/test_cli_log_lines.py',)),
    Mutation('bar-no-delay', 'a decode shorter than BAR_DELAY_S shows no bar',
             'dllm/cli/progress.py', 'enabled=enabled, delay=BAR_DELAY_S)',
             'enabled=enabled, delay=0.0)', ('tests/test_cli_bar_delay.py',)),
    Mutation('bar-not-finished', 'rows ended early count as done on the token bar',
             'dllm/cli/progress.py', '    bar.update(start + len(rows) * per_row - bar.n)  # rows ended early count as done',
             '    pass', ('tests/test_cli_progress.py::test_rows_that_stop_early_count_as_done',)),
    Mutation('empty-messages-ok', "a prompts file's empty chat list is refused naming its line",
             'dllm/cli/prompts.py', 'if isinstance(messages, list) and messages and all(',
             'if isinstance(messages, list) and all(', ('tests/test_prompts_file_empty_entries.py',)),
    Mutation('stdin-prompt-newline-kept', 'echo hi | dllm generate - asks "hi" (stdin\'s last newline dropped)',
             'dllm/cli/prompts.py', 'text = read_stdin().removesuffix("\\n")',
             'text = read_stdin()', ('tests/cli/test_stdin_prompt_text.py',)),
    Mutation('echo-raw-newline', '--echo under --raw prints the prompt without a newline (the continuation follows it)',
             'dllm/cli/prompts.py', 'return text if raw else text + "\\n"',
             'return text + "\\n"', ('tests/cli/test_prompt_echo_and_system.py',)),
    Mutation('two-systems-ok', '--system refuses a chat list with its own system message',
             'dllm/cli/prompts.py', 'if p.prompt and p.prompt[0].get("role") == "system":',
             'if False:', ('tests/cli/test_prompt_echo_and_system.py',)),
    Mutation('prompt-length-exclusive', 'a prompt and canvas that fill the context exactly are decoded',
             'dllm/cli/prompts.py', 'if len(row) + config.gen_length > context:',
             'if len(row) + config.gen_length >= context:', ('tests/cli/test_cli_value_edges.py',)),
    Mutation('nonneg-int-minus', 'non_negative_int refuses -1',
             'dllm/cli/options.py', 'return _int_at_least(text, 0, "an integer >= 0")',
             'return _int_at_least(text, -1, "an integer >= 0")', ('tests/cli/test_cli_value_edges.py',)),
    Mutation('positive-float-zero', 'positive_float refuses 0',
             'dllm/cli/options.py', '    if not value > 0:',
             '    if not value >= 0:', ('tests/cli/test_cli_value_edges.py',)),
    Mutation('two-models-ok', 'two different models (MODEL and --model) are refused',
             'dllm/cli/options.py', 'if tag is not None and flag is not None and tag != flag:',
             'if False:', ('tests/cli/test_cli_option_pairs.py',)),
    Mutation('max-and-gen-both-ok', '--max-tokens with --gen-length is refused',
             'dllm/cli/options.py', '    if "gen_length" in getattr(args, "given_options", ()):\n        raise',
             '    if False:\n        raise', ('tests/cli/test_cli_option_pairs.py',)),
    Mutation('uniform-policy-args-default', 'only the default rule (low_confidence without options) becomes eb_sampler',
             'dllm/engine/uniform_state.py', 'default_rule = config.policy == "low_confidence" and not config.policy_args',
             'default_rule = config.policy == "low_confidence"', ('tests/strategies/test_uniform_policy_args.py',)),
    Mutation('empty-prompt-decoded', 'an empty prompt is refused before any model work',
             'dllm/engine/decoding.py', '        if len(prompt) == 0:\n            raise',
             '        if False:\n            raise', ('tests/test_check_prompts_edges.py',)),
    Mutation('context-exclusive', 'a prompt and canvas that fill the context exactly are taken (engine)',
             'dllm/engine/decoding.py', '        if total <= max_length:\n            continue',
             '        if total < max_length:\n            continue', ('tests/test_check_prompts_edges.py',)),
]


def copy_tree(dest: Path) -> None:
    """The package, the tests and the pytest configuration: what the named tests import."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("dllm", "tests"):
        shutil.copytree(ROOT / name, dest / name, ignore=ignore)
    shutil.copy2(ROOT / "pyproject.toml", dest / "pyproject.toml")


def run_tests(copy: Path, tests: tuple[str, ...], timeout: float, env: dict[str, str]) -> tuple[str, float]:
    """'passed', 'failed', 'error (rc N)' or 'timeout', and the seconds it took."""
    began = time.monotonic()
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    try:
        done = subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", time.monotonic() - began
    outcome = {0: "passed", 1: "failed"}.get(done.returncode, f"error (rc {done.returncode})")
    return outcome, time.monotonic() - began


def apply(copy: Path, mutation: Mutation) -> str:
    """Mutate the copy's file; returns the original text to put back."""
    target = copy / mutation.path
    text = target.read_text()
    if text.count(mutation.old) != 1:
        raise SystemExit(f"{mutation.name}: {mutation.old!r} occurs {text.count(mutation.old)} times in "
                         f"{mutation.path}, not once; update the mutation to the current code")
    target.write_text(text.replace(mutation.old, mutation.new))
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", metavar="NAME", help="run these mutations (see --list)")
    ap.add_argument("--list", action="store_true", help="list the mutations and their tests, run nothing")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per test run (default 600)")
    ap.add_argument("--budget", type=float, default=3600, help="seconds for the whole check (default 3600)")
    args = ap.parse_args(argv)
    names = {m.name for m in MUTATIONS}
    unknown = sorted(set(args.only or ()) - names)
    if unknown:
        ap.error(f"unknown mutation(s) {unknown}; known: {sorted(names)}")
    chosen = [m for m in MUTATIONS if not args.only or m.name in args.only]
    if args.list:
        for m in chosen:
            print(f"{m.name}: {m.claim}\n    {m.path}: {m.old!r} -> {m.new!r}\n    must fail: {' '.join(m.tests)}")
        return 0
    deadline = time.monotonic() + args.budget
    with tempfile.TemporaryDirectory(prefix="dllm-mutants-") as tmp:
        copy = Path(tmp)
        copy_tree(copy)
        env = {**os.environ, "PYTHONPATH": str(copy)}
        try:  # the copy's tests look for the data beside the working tree, where it is
            from dllm.data.prompts import DATA_DIR_ENV, default_data_dir
            env.setdefault(DATA_DIR_ENV, str(default_data_dir()))
        except FileNotFoundError:
            print("note: no ParallelBench data; tests that need it skip, so their mutations may survive")
        tests = tuple(dict.fromkeys(t for m in chosen for t in m.tests))
        outcome, seconds = run_tests(copy, tests, args.timeout, env)
        print(f"baseline (unmutated copy): {outcome} in {seconds:.0f} s")
        if outcome != "passed":
            print("the named tests do not pass unmutated: fix them before reading mutation results")
            return 2
        results = []
        for m in chosen:
            if time.monotonic() > deadline:
                results.append((m, "not run (budget)", 0.0))
                continue
            original = apply(copy, m)
            try:
                outcome, seconds = run_tests(copy, m.tests, min(args.timeout, deadline - time.monotonic()), env)
            finally:
                (copy / m.path).write_text(original)
            verdict = {"failed": "caught", "passed": "SURVIVED"}.get(outcome, outcome)
            results.append((m, verdict, seconds))
            print(f"{verdict:>10}  {m.name} ({seconds:.0f} s): {m.claim}", flush=True)
    survived = [m.name for m, verdict, _ in results if verdict == "SURVIVED"]
    caught = sum(verdict == "caught" for _, verdict, _ in results)
    print(f"\n{caught} of {len(results)} mutations caught; survived: {', '.join(survived) or 'none'}")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
