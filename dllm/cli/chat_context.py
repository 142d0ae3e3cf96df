"""``dllm chat`` and the model's context: the whole conversation plus the answer canvas must fit.

An answer length that leaves no room for any message is refused when it is given (the command
line, ``/set``), not at every turn after; a turn that does not fit is refused before its decode
with the fix a chat has: a shorter message when it is the first, ``/reset`` once the conversation
has grown, or a shorter answer (``/set max-tokens=K``) when one would fit.
"""
from __future__ import annotations

from dllm.api.request import canvas_length
from dllm.engine.config import GenerationConfig


def longest_answer(model, config: GenerationConfig, room: int) -> int:
    """The largest ``max_tokens`` whose canvas fits in ``room`` tokens: a single block follows the
    answer's length, fixed blocks (or a uniform-state model's canvases) take whole blocks."""
    if config.block_length == config.gen_length and config.block_length != canvas_length(model.model):
        return max(room, 0)
    return max(room, 0) // config.block_length * config.block_length


def template_tokens(model, system: str | None = None) -> int:
    """Tokens the chat template (and the system message) take around an empty message: the least
    a turn's prompt holds."""
    lead = [{"role": "system", "content": system}] if system else []
    return len(model.encode([*lead, {"role": "user", "content": ""}], chat=True))


def check_answer_room(model, config: GenerationConfig, given: str, fix: str, system: str | None = None) -> None:
    """Refuse ``config`` when its canvas leaves no room for a message in the model's context;
    ``given`` names what set it (``--max-tokens 600``), ``fix`` how to set a smaller one
    (``--max-tokens``, ``/set max-tokens=``)."""
    context = model.model.config.max_sequence_length
    template = template_tokens(model, system)
    if config.gen_length + template < context:
        return
    if system and template + 2 > context:  # not even a one-token message and a one-token answer
        raise ValueError(f"the system message takes {template} tokens with the chat template, and the model's "
                         f"context is {context}; shorten --system")
    longest = longest_answer(model, config, context - template - 1)
    hint = f"; use {fix}{longest} or less" if longest > 0 else ""
    raise ValueError(f"{given} gives an answer canvas of {config.gen_length} tokens, which leaves no room for a "
                     f"message in the model's context of {context} (the chat template"
                     f"{' and the system message' if system else ''}: {template} tokens){hint}")


def check_conversation_fits(model, history: list[dict[str, str]], config: GenerationConfig) -> None:
    """Refuse a turn whose conversation (``history``: a system message, if any, the turns, the new
    message) and answer canvas exceed the model's context, naming what to do in a chat."""
    context = model.model.config.max_sequence_length
    prompt = len(model.encode(history, chat=True))
    if prompt + config.gen_length <= context:
        return
    longest = longest_answer(model, config, context - prompt)
    shorter = f"/set max-tokens={longest}" if longest > 0 else None
    if sum(m["role"] == "user" for m in history) == 1:
        what, fixes = "your message has", ["shorten the message", shorter]
    else:
        what, fixes = "the conversation has", ["/reset to start a new one", shorter]
    raise ValueError(f"{what} {prompt} tokens with the chat template + an answer canvas of {config.gen_length} "
                     f"= {prompt + config.gen_length} > the model's context of {context}; "
                     + " or ".join(f for f in fixes if f))
