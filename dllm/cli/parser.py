"""The one error style of every ``dllm`` command: ``dllm <command>: error: <what and the fix>``.

argparse prints its usage block before an error and reports a subcommand's unknown flag against
the top-level parser; ``CommandParser`` prints one line naming the command at fault, with a
"did you mean" for near misses of option values, commands and flags, and exits with status 2.
"""
from __future__ import annotations

import argparse
from typing import Callable, NoReturn, Sequence

from dllm.validation import did_you_mean

EXIT_USAGE = 2  # bad input, as argparse

# flags of other tools (transformers, vLLM, llama.cpp) people type, and what dllm calls them: the
# first of the names the command takes
FOREIGN_FLAGS = {
    "--max-new-tokens": ("--max-tokens",),
    "--max-length": ("--max-tokens",),
    "--n-predict": ("--max-tokens",),
    "--num-return-sequences": ("--n",),
    "--prompt-file": ("--prompts-file",),
    "--prompts": ("--prompts-file",),
    "--max-num-seqs": ("--max-batch", "--batch-size"),
    "--quantization": ("--quantize",),
    "--tokenizer-revision": ("--revision",),
    "--code-revision": ("--revision",),
    "--load-in-8bit": ("--quantize",),
    "-m": ("--model",),  # llama.cpp's
}
# commands of other tools (ollama, vLLM) people type, and dllm's
FOREIGN_COMMANDS = {"run": "chat", "list": "models", "ls": "models", "complete": "generate"}

THREADS_NOTE = ("dllm uses torch's threads (every CPU it may run on; OMP_NUM_THREADS sets them); dllm serve "
                "takes --threads")
NO_COUNTERPART = ("a decoding option of autoregressive engines that dllm has no counterpart for (its --policy "
                  "chooses which positions to commit; --temperature, --top-p and --top-k shape the sampling)")
# flags of other tools dllm has no counterpart of: what it does instead (never a near-miss guess,
# which would name an option of another meaning: --max-model-len is not --max-tokens)
FOREIGN_NOTES = {
    "--stream": "generate prints each answer once it is final; `dllm chat` shows it as it fills",
    "--max-model-len": "dllm's context is the checkpoint's (config.json); a prompt and its answer that do not fit "
                       "are refused, and --max-tokens caps the answer",
    "--ctx-size": "dllm's context is the checkpoint's (config.json); --max-tokens caps the answer",
    "--gpu-memory-utilization": "dllm allocates what each decode needs; --memory-budget-mb refuses a decode "
                                "planned past a budget",
    "--generation-config": "dllm reads only generation_config.json's end-of-text ids; set the sampling defaults "
                           "with --temperature, --top-p, --top-k and --max-tokens",
    "--enforce-eager": "dllm runs eagerly unless --cuda-graphs is given; drop it",
    "--tokenizer": "dllm reads the tokenizer from the checkpoint directory (--model)",
    "--do-sample": "dllm samples when --temperature is above 0 (0: greedy)",
    "--pipeline-parallel-size": "dllm splits a model by tensor parallelism only (--tensor-parallel N)",
    "--data-parallel-size": "run one `dllm serve` per copy of the model behind a load balancer, or "
                            "`dllm bench throughput` under torchrun for offline batches",
    "--enable-log-requests": "dllm does not log requests' contents; --uvicorn-log-level info logs one access "
                             "line per request",
    "--block-size": "dllm has no paged KV cache to size; --block-length is the diffusion block (the tokens "
                    "decoded together), another thing",
    "--max-logprobs": "dllm returns up to 20 alternatives per token (top_logprobs, OpenAI's bound); nothing to set",
    "--max-num-batched-tokens": "dllm batches rows, not tokens: --max-batch rows decode together, --max-queue "
                                "more wait",
    "--kv-cache-dtype": "dllm keeps its KV cache in the model's dtype (--dtype)",
    "--enable-prefix-caching": "block-causal models under --cache prefix or dual reuse the prompt blocks of earlier "
                               "requests on their own (--prompt-cache-mb sizes the store)",
    "--enable-lora": "dllm merges one LoRA adapter into the weights at load (--adapter DIR)",
    "--lora-modules": "dllm merges one LoRA adapter into the weights at load (--adapter DIR)",
    "--ssl-keyfile": "dllm serves plain HTTP; put a TLS reverse proxy in front (--allowed-hosts names it)",
    "--ssl-certfile": "dllm serves plain HTTP; put a TLS reverse proxy in front (--allowed-hosts names it)",
    "--allowed-methods": "browsers may call GET and POST, with the Authorization and Content-Type headers "
                         "(--allowed-origins says which origins)",
    "--allowed-headers": "browsers may call GET and POST, with the Authorization and Content-Type headers "
                         "(--allowed-origins says which origins)",
    "--reasoning-parser": "dllm returns the answer as the model wrote it, reasoning included (no reasoning_content)",
    "--speculative-config": "a diffusion model drafts in parallel already; --strategy apd verifies its drafts with an "
                            "autoregressive helper (--helper)",
    # llama.cpp's -n is a token count; a suggestion of dllm's --n (vLLM's n, samples) would change the meaning
    "-n": "llama.cpp's -n (tokens to predict) is --max-tokens here; --n, where a command takes it, is the "
          "number of samples per prompt (vLLM's n)",
    "-c": "llama.cpp's -c (context size): dllm's context is the checkpoint's (config.json); --max-tokens caps "
          "the answer",
    "-t": f"llama.cpp's -t (threads): {THREADS_NOTE}",
    "--threads": THREADS_NOTE,
    "--ignore-eos": "a row's text ends at its first end-of-text; --no-stop-at-eos decodes the positions after it "
                    "too, and --max-tokens sets the answer's length",
    **{flag: NO_COUNTERPART for flag in ("--min-tokens", "--min-p", "--repetition-penalty", "--repeat-penalty",
                                         "--presence-penalty", "--frequency-penalty", "--num-beams")},
    "--config": "dllm takes its options on the command line only",
    "--download-dir": "dllm reads the Hugging Face cache ($HF_HOME, $HF_HUB_CACHE); or pass a directory to --model",
}


# a flag's near miss is closer than a value's: at difflib's 0.6, the dashes and "--max-" shared by
# flags of other meanings suggested --max-tokens for --max-model-len and --max-logprobs
FLAG_CUTOFF = 0.7


def one_edit_apart(a: str, b: str) -> bool:
    """Whether ``b`` is ``a`` with one letter changed, added, dropped or two neighbours swapped: a typo
    (``--prot`` of ``--port``), which argparse would take as the prefix of another flag instead."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) != len(b):
        short, long = sorted((a, b), key=len)
        return any(long[:i] + long[i + 1:] == short for i in range(len(long)))
    diff = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
    return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]]
                              and a[diff[1]] == b[diff[0]])


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line; its subcommands are CommandParsers too
    (argparse makes them of the parent's class).

    A command's options may be added when it is chosen (``fill_later``): the registries that
    list their choices import torch, which ``dllm --help`` and ``dllm --version`` never need."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._fills: list[Callable[[argparse.ArgumentParser], None]] = []

    def fill_later(self, fill: Callable[[argparse.ArgumentParser], None]) -> None:
        """Run ``fill(self)`` (add options) before this parser first parses or shows its help."""
        self._fills.append(fill)

    def fill_now(self) -> None:
        """Run the pending fills of this parser, in the order they were asked for."""
        while self._fills:
            self._fills.pop(0)(self)

    def fill_all(self) -> None:
        """Run every pending fill of this parser and of the commands below it: the whole parser."""
        self.fill_now()
        for command in subcommands(self):
            command.fill_now()

    def format_help(self) -> str:
        self.fill_now()
        return super().format_help()

    def format_usage(self) -> str:
        self.fill_now()
        return super().format_usage()

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_known_args(self, args: Sequence[str] | None = None, namespace=None):  # type: ignore[override]
        """As argparse, once this command's options are added (a chosen subcommand's are added
        when the parent hands it its arguments)."""
        self.fill_now()
        return super().parse_known_args(args, namespace)

    def parse_args(self, args: Sequence[str] | None = None, namespace=None):  # type: ignore[override]
        """As argparse, but an unknown argument is reported by the command it was given to."""
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            parser = getattr(namespace, "command_parser", None) or self
            parser.error(unknown_arguments(parser, extras))
        return namespace

    def _get_option_tuples(self, option_string: str):
        """argparse's prefix matches, one per option: a prefix of two names of one option
        (``--prompt``: ``--prompts-file``, ``--prompts``) is that option, not ambiguous. A single-dash
        flag is never a prefix of a longer one (llama.cpp's ``-t 8``, threads, was ``-tp 8``); its
        value may still be attached (``-pTEXT``). A prefix of one option that is a typo of another
        (``--prot``: ``--protect-health-metrics``, or ``--port`` mistyped) is ambiguous, named as such,
        unless it is a typo of the option it begins too (``--step``: ``--steps``, not ``--stop``)."""
        matches = super()._get_option_tuples(option_string)
        if not option_string.startswith("--"):
            matches = [m for m in matches if m[1] == option_string[:2]]
        matches = list({id(match[0]): match for match in matches}.values())
        flag = option_string.split("=", 1)[0]
        if len(matches) == 1 and not any(one_edit_apart(flag, name) for name in matches[0][0].option_strings):
            matches += [(action, name, *matches[0][2:]) for name, action in self._option_string_actions.items()
                        if action is not matches[0][0] and name.startswith("--") and one_edit_apart(flag, name)]
        return matches

    def _check_value(self, action: argparse.Action, value) -> None:
        if action.choices is None or value in action.choices:
            return
        names = [str(c) for c in action.choices]
        if isinstance(action, argparse._SubParsersAction):
            meant = FOREIGN_COMMANDS.get(str(value))
            hint = f" (did you mean {meant!r}?)" if meant in names else did_you_mean(str(value), names)
            if str(value) == "help":
                hint = f"; for help, {self.prog} --help or {self.prog} COMMAND --help"
            raise argparse.ArgumentError(None, f"unknown command {value!r}{hint}; commands: {', '.join(names)}")
        raise argparse.ArgumentError(action, f"invalid choice {value!r}{did_you_mean(str(value), names)}; "
                                             f"one of: {', '.join(names)}")


def option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every long flag ``parser`` takes."""
    return [s for action in parser._actions for s in action.option_strings if s.startswith("--")]


def unknown_arguments(parser: argparse.ArgumentParser, extras: list[str]) -> str:
    """The message for arguments ``parser`` does not take: the first unknown flag with the flag
    meant (a near miss, an underscore spelling, another tool's name), or the stray values."""
    flags = [e for e in extras if e.startswith("-") and len(e) > 1]
    if not flags:
        return f"unexpected argument(s) {' '.join(extras)}{_stray_words_hint(parser)}"
    flag = flags[0].split("=", 1)[0]
    known = option_strings(parser)
    dashed = flag.replace("_", "-")
    if dashed != flag and dashed in known:
        hint = f" (did you mean {dashed!r}?)"
    elif (meant := next((name for name in FOREIGN_FLAGS.get(dashed, ()) if name in known), None)) is not None:
        hint = f" (did you mean {meant!r}?)"
    elif dashed in FOREIGN_NOTES:
        hint = f"; {FOREIGN_NOTES[dashed]}"
    else:
        hint = did_you_mean(dashed, known, FLAG_CUTOFF)
    return f"unknown option {flag!r}{hint}"


def _stray_words_hint(parser: argparse.ArgumentParser) -> str:
    """Why words were left over: a command without positional arguments takes options only; one
    with a list (generate's prompts) takes it in one piece, so an option inside split it."""
    positionals = [a for a in parser._actions if not a.option_strings and a.nargs not in (argparse.PARSER,)]
    lists = [a for a in positionals if a.nargs in ("*", "+")]
    if not lists:
        one = [a.metavar or a.dest for a in positionals if a.nargs == "?"]
        return f": {parser.prog} takes {f'one {one[0]} and ' if one else ''}options only"
    name = lists[0].dest
    return f": give every {name} together, before or after the options (a {name} with spaces needs quotes)"


def subcommands(parser: argparse.ArgumentParser):
    """Every parser below ``parser`` (``generate``, ``bench``, ``bench throughput``, ...); a
    command filled on the way (``fill_all``) yields the commands its fill added."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                yield command
                yield from subcommands(command)


def name_command_parsers(parser: argparse.ArgumentParser) -> None:
    """Set ``command_parser`` on the namespace of every subcommand below ``parser``, so errors
    found after parsing name the command they belong to."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                command.set_defaults(command_parser=command)
                name_command_parsers(command)
