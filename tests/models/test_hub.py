"""Hub ids (``org/name``) load from a Hugging Face cache laid out as huggingface_hub lays it out
(models--org--name/{blobs,refs,snapshots}), offline and with no network access attempted: the
same tokens as the directory, the revision's snapshot, a local directory shadowing the id, and a
missing id as an error naming the command that fetches it and the cache it goes to."""
from __future__ import annotations

import argparse
import hashlib
import os
import socket
from pathlib import Path

import pytest
import torch

import dllm
from dllm.cli.options import add_model_options, load_from_args
from dllm.models.bundled import model_label
from dllm.models.hub import HUB_FILES, SUBFOLDERS, hub_snapshot
from dllm.models.tiny import write_tiny_checkpoint

REPO_ID = "org/tiny"
OLD, NEW = "a" * 40, "b" * 40  # commit hashes of two snapshots


def _add_snapshot(cache: Path, repo_id: str, commit: str, source: Path) -> Path:
    """Files of ``source`` as blobs, linked from snapshots/<commit>/ (huggingface_hub's layout)."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir(exist_ok=True)
    for file in sorted(source.iterdir()):
        data = file.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snapshot / file.name).symlink_to(os.path.relpath(blob, snapshot))
    return snapshot


def _set_ref(cache: Path, repo_id: str, ref: str, commit: str) -> None:
    refs = cache / ("models--" + repo_id.replace("/", "--")) / "refs"
    refs.mkdir(parents=True, exist_ok=True)
    (refs / ref).write_text(commit)  # huggingface_hub writes the bare hash, no newline


@pytest.fixture
def no_network(monkeypatch):
    """Any socket connection fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.fixture
def hub(tmp_path, monkeypatch, no_network):
    """A hub cache holding org/tiny at two commits (main -> NEW, tag v1 -> OLD), offline."""
    sources = {OLD: write_tiny_checkpoint(tmp_path / "src_old", "llada", seed=11),
               NEW: write_tiny_checkpoint(tmp_path / "src_new", "llada", seed=12)}
    cache = tmp_path / "hub"
    snapshots = {commit: _add_snapshot(cache, REPO_ID, commit, src) for commit, src in sources.items()}
    _set_ref(cache, REPO_ID, "main", NEW)
    _set_ref(cache, REPO_ID, "v1", OLD)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path / "src_old")  # no ./org/tiny here
    return {"cache": cache, "sources": sources, "snapshots": snapshots}


def _same_weights(a: dllm.DiffusionLM, b: dllm.DiffusionLM) -> bool:
    sa, sb = a.model.state_dict(), b.model.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_a_hub_id_loads_from_the_cache_with_the_tokens_of_its_directory(hub):
    by_id = dllm.load(REPO_ID, device="cpu", dtype="float32")
    by_dir = dllm.load(hub["sources"][NEW], device="cpu", dtype="float32")
    assert by_id.path == hub["snapshots"][NEW]
    options = {"gen_length": 16, "block_length": 8, "policy": "threshold", "policy_args": {"tau": 0.5}}
    prompts = ["hello there", "a b c"]
    assert by_id.generate(prompts, **options).token_ids == by_dir.generate(prompts, **options).token_ids
    assert model_label(by_id.path) == f"{REPO_ID}@{NEW}"  # results name the id, not this machine's cache


def test_revision_picks_its_snapshot(hub):
    old = dllm.load(hub["sources"][OLD], device="cpu", dtype="float32")
    for revision in ("v1", OLD):
        loaded = dllm.load(REPO_ID, revision=revision, device="cpu", dtype="float32")
        assert loaded.path == hub["snapshots"][OLD] and _same_weights(loaded, old)
    assert not _same_weights(dllm.load(REPO_ID, device="cpu", dtype="float32"), old)
    parser = argparse.ArgumentParser()
    add_model_options(parser)
    args = parser.parse_args(["--model", REPO_ID, "--revision", "v1", "--device", "cpu", "--dtype", "float32"])
    assert load_from_args(args).path == hub["snapshots"][OLD]
    with pytest.raises(FileNotFoundError, match=f"revision no-such-tag.*download {REPO_ID} --revision no-such-tag"):
        dllm.load(REPO_ID, revision="no-such-tag")


def test_a_local_directory_shadows_the_hub_id(hub, tmp_path, monkeypatch):
    local = write_tiny_checkpoint(tmp_path / "work" / "org" / "tiny", "llada", seed=13)
    monkeypatch.chdir(tmp_path / "work")
    loaded = dllm.load(REPO_ID, device="cpu", dtype="float32")
    assert loaded.path == Path(REPO_ID)
    assert _same_weights(loaded, dllm.load(local, device="cpu", dtype="float32"))
    with pytest.raises(ValueError, match="applies to Hugging Face hub ids only.*local directory"):
        dllm.load(REPO_ID, revision="v1")


def test_a_missing_id_offline_names_the_download_and_the_cache(hub):
    cache = str(hub["cache"])
    with pytest.raises(FileNotFoundError) as err:
        dllm.load("org/absent")
    message = str(err.value)
    assert "download org/absent" in message and "HF_HUB_OFFLINE=1" in message and cache in message
    assert "--include '*.safetensors'" in message
    partial = write_tiny_checkpoint(hub["cache"].parent / "partial", "llada", seed=14)
    (partial / "model.safetensors").unlink()
    _add_snapshot(hub["cache"], "org/partial", NEW, partial)
    _set_ref(hub["cache"], "org/partial", "main", NEW)
    with pytest.raises(FileNotFoundError, match=r"lacks \*\.safetensors of its snapshot.*download org/partial"):
        hub_snapshot("org/partial")


def test_only_the_top_level_files_dllm_reads_are_fetched():
    from huggingface_hub.utils import filter_repo_objects

    repo = ["config.json", "generation_config.json", "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors", "model.safetensors.index.json", "tokenizer.json",
            "tokenizer_config.json", "chat_template.jinja", "modeling_llada.py", "configuration_llada.py",
            "pytorch_model.bin", "README.md", "original/consolidated.safetensors", "onnx/config.json",
            "vocab.json", "merges.txt", "added_tokens.json", "special_tokens_map.json", "tokenization_dream.py"]
    fetched = set(filter_repo_objects(repo, allow_patterns=HUB_FILES, ignore_patterns=SUBFOLDERS))
    assert fetched == {"config.json", "generation_config.json", "model-00001-of-00002.safetensors",
                       "model-00002-of-00002.safetensors", "model.safetensors.index.json", "tokenizer.json",
                       "tokenizer_config.json", "chat_template.jinja", "vocab.json", "merges.txt", "added_tokens.json",
                       "special_tokens_map.json"}


def test_lm_eval_pretrained_takes_a_hub_id_and_revision(hub):
    pytest.importorskip("lm_eval")
    from dllm.eval.lm_eval import DllmLM

    lm = DllmLM(pretrained=REPO_ID, revision="v1", device="cpu")
    assert lm.dllm.path == hub["snapshots"][OLD]
