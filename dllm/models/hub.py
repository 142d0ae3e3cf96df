"""Hugging Face hub ids (``org/name``) -> a checkpoint directory in the user's hub cache.

The cache comes first: a snapshot there that holds config.json, the tokenizer and every weight
file loads with no network access. Otherwise huggingface_hub fetches what is missing, unless
``HF_HUB_OFFLINE=1``, when a model not in the cache is an error naming the command that
fetches it and the cache it goes to. Only the top-level files in ``HUB_FILES`` are fetched
(never remote code). ``HF_HOME`` / ``HF_HUB_CACHE`` / ``HF_HUB_OFFLINE`` are read at each call,
so a process that sets them after importing huggingface_hub is honoured too.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

# What dllm reads (``dllm.models.loading``: config.json, generation_config.json's end ids, the weights;
# ``dllm.models.tokenizer``).
# vocab.json / merges.txt / added_tokens.json / special_tokens_map.json: the tokenizer of checkpoints that
# publish no tokenizer.json (Dream-v0, Fast-dLLM v2).
HUB_FILES = ["config.json", "generation_config.json", "*.safetensors", "model.safetensors.index.json",
             "tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "vocab.json", "merges.txt",
             "added_tokens.json", "special_tokens_map.json"]
SUBFOLDERS = ["*/*"]  # dllm reads the top level only; other variants live in subfolders
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")


class HubModelError(FileNotFoundError):
    """A hub id that cannot be resolved to a complete checkpoint directory."""


def is_hub_id(name: str) -> bool:
    """``org/name`` as the hub spells repository ids (one slash, no path syntax)."""
    return bool(_HUB_ID.fullmatch(name)) and ".." not in name


def hub_cache_dir() -> Path:
    """The hub cache huggingface_hub uses: $HF_HUB_CACHE, else $HF_HOME/hub, else its default."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.path.expandvars(os.path.expanduser(os.environ["HF_HUB_CACHE"])))
    if os.environ.get("HF_HOME"):
        return Path(os.path.expandvars(os.path.expanduser(os.environ["HF_HOME"]))) / "hub"
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` forbids network access (now, or when huggingface_hub was imported)."""
    from huggingface_hub import constants

    value = os.environ.get("HF_HUB_OFFLINE")
    if value is not None:
        return value.strip().upper() in {"1", "ON", "YES", "TRUE"}
    return bool(constants.HF_HUB_OFFLINE)


def hub_snapshot(repo_id: str, revision: str | None = None) -> Path:
    """The checkpoint directory of ``repo_id`` at ``revision`` (default: main) in the hub cache,
    fetching its missing files when the network is allowed."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.utils import LocalEntryNotFoundError

    cache, offline = hub_cache_dir(), hub_offline()
    fetch = {"repo_id": repo_id, "revision": revision, "cache_dir": cache,
             "allow_patterns": HUB_FILES, "ignore_patterns": SUBFOLDERS}
    missing: list[str] | None = None  # None: no snapshot of this revision in the cache
    try:
        path = Path(snapshot_download(**fetch, local_files_only=True))
        missing = missing_files(path)
        if not missing:
            return path
    except LocalEntryNotFoundError:  # not cached (or, in newer huggingface_hub, known to be partial)
        pass
    if offline:
        raise HubModelError(_not_cached(repo_id, revision, cache, missing, "HF_HUB_OFFLINE=1 forbids downloading"))
    try:
        path = Path(snapshot_download(**fetch))
    except LocalEntryNotFoundError as err:
        reason = f"the Hub cannot be reached ({_one_line(err)})"
        raise HubModelError(_not_cached(repo_id, revision, cache, missing, reason)) from err
    except OSError as err:  # repository or revision not found, gated, other HTTP errors
        login = "hf auth login" if _tool() == "hf" else "huggingface-cli login"
        raise HubModelError(f"cannot fetch {repo_id!r} (revision {revision or 'main'}) from the Hugging Face "
                            f"Hub: {type(err).__name__}: {_one_line(err)}; check the id (and log in with `{login}` for a "
                            "gated model), or pass a checkpoint directory") from err
    if missing := missing_files(path):
        raise HubModelError(f"{repo_id!r} (revision {revision or 'main'}) has no {', '.join(missing)} at its top "
                            f"level ({path}); dllm needs config.json, tokenizer.json (or vocab.json + merges.txt) and "
                            "safetensors weights")
    return path


def _one_line(err: BaseException) -> str:
    """huggingface_hub's message on one line (its errors run over several), for an error that is
    one line."""
    return " ".join(str(err).split())


def missing_files(path: Path) -> list[str]:
    """What a snapshot lacks of config.json, its tokenizer (tokenizer.json, or vocab.json + merges.txt)
    and its weights (every indexed shard)."""
    import json

    missing = [] if (path / "config.json").is_file() else ["config.json"]
    if not (path / "tokenizer.json").is_file() and not all((path / n).is_file() for n in ("vocab.json", "merges.txt")):
        missing.append("tokenizer.json")
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (ValueError, KeyError, TypeError, AttributeError):
            return missing  # a damaged index is reported by the loader, with its name
        missing += [shard for shard in shards if not (path / shard).is_file()]
    elif not any(path.glob("*.safetensors")):
        missing.append("*.safetensors")
    return missing


def hub_label(path: Path) -> str | None:
    """``org/name@commit`` for a directory in a hub cache (how results name it), else None."""
    path = Path(path)
    repo = path.parent.parent.name
    if path.parent.name != "snapshots" or not repo.startswith("models--"):
        return None
    return repo.removeprefix("models--").replace("--", "/", 1) + "@" + path.name


def _not_cached(repo_id: str, revision: str | None, cache: Path, missing: list[str] | None, reason: str) -> str:
    held = "holds no snapshot of it" if missing is None else f"lacks {', '.join(missing)} of its snapshot"
    return (f"{repo_id!r} is not a local directory or a bundled model, and the Hugging Face cache at {cache} "
            f"{held} (revision {revision or 'main'}); {reason}. Fetch it where the network is allowed with "
            f"`{download_command(repo_id, revision, cache)}`, or pass a checkpoint directory")


def download_command(repo_id: str, revision: str | None, cache: Path) -> str:
    """The hub's command line that fetches what dllm reads of ``repo_id`` into ``cache``."""
    tool = _tool()
    quoted = [f"'{pattern}'" for pattern in HUB_FILES]
    include = " ".join(f"--include {q}" for q in quoted) if tool == "hf" else "--include " + " ".join(quoted)
    rev = f" --revision {revision}" if revision else ""
    return f"{tool} download {repo_id}{rev} {include} --exclude '{SUBFOLDERS[0]}' --cache-dir {cache}"


def _tool() -> str:
    """The hub's command-line tool: ``hf`` since huggingface_hub 0.34, ``huggingface-cli`` before
    (whose ``--include`` takes its patterns after one flag)."""
    from huggingface_hub import __version__

    major, minor = (int(part) for part in re.findall(r"\d+", __version__)[:2])
    return "hf" if (major, minor) >= (0, 34) else "huggingface-cli"
