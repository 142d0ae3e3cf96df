"""A chat template given at load (``dllm.load(chat_template=...)``, ``--chat-template``), as vLLM's
``--chat-template``: a checkpoint without one, or one whose template ignores tools, gets the
user's. A path to a file or the Jinja text itself; checked by rendering a conversation before any
weight is read, so a broken template is an error at load, not at the first request.
"""
from __future__ import annotations

import os
from pathlib import Path

from dllm.validation import OptionTypeError

PROBE = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
         {"role": "assistant", "content": "a"}, {"role": "user", "content": "u"}]


def read_chat_template(template: str | os.PathLike) -> str:
    """The template's Jinja text: ``template`` read from its file when it names one, else taken as
    the text (which must hold Jinja markup: a path that does not exist is named as missing)."""
    if not isinstance(template, (str, os.PathLike)):
        raise OptionTypeError(f"chat_template must be a Jinja template (str) or a file holding one (str or Path), "
                              f"got {type(template).__name__}")
    text = str(template)
    if isinstance(template, os.PathLike) or ("{{" not in text and "{%" not in text):
        path = Path(template)
        if not path.is_file():
            raise ValueError(f"chat_template {text[:200]!r} is neither a file nor a Jinja template (no {{{{ or {{% "
                             "in it); give the path of a template file, or the template's text")
        text = path.read_text()
    return text


def set_chat_template(tokenizer, template: str | os.PathLike) -> None:
    """Put the template on ``tokenizer`` after rendering a conversation with it (system, user,
    assistant, user; a template may refuse a system turn, as Gemma's do, and still serve)."""
    text = read_chat_template(template)
    previous = tokenizer.chat_template
    tokenizer.chat_template = text
    try:
        try:
            tokenizer.apply_chat_template(PROBE, tokenize=False, add_generation_prompt=True)
        except Exception:  # noqa: BLE001  retried without the system turn below
            tokenizer.apply_chat_template(PROBE[1:], tokenize=False, add_generation_prompt=True)
    except Exception as err:  # noqa: BLE001  jinja2 raises its own TemplateError kinds
        tokenizer.chat_template = previous
        raise ValueError(f"the chat template cannot render a conversation ({type(err).__name__}: {err}); "
                         "fix the template (it reads messages, each with role and content, and "
                         "add_generation_prompt)") from err
