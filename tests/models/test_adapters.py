"""LoRA adapters in the PEFT layout merged at load (``dllm.load(base, adapter=DIR)``): equal to
merging by hand into the checkpoint, for plain, fused (LLaDA2 query_key_value) and per-expert
tensors, fp32 and bf16 adapters, rsLoRA and rank patterns; mismatches are named."""
from __future__ import annotations

import json
import math
import shutil

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

import dllm
from dllm.cli.main import build_parser
from dllm.models.adapters import AdapterError
from dllm.models.tiny import write_tiny_checkpoint

PREFIX = "base_model.model."


def read_checkpoint(directory) -> dict[str, torch.Tensor]:
    out = {}
    for file in sorted(directory.glob("*.safetensors")):
        with safe_open(file, framework="pt") as f:
            out.update({k: f.get_tensor(k) for k in f.keys()})
    return out


def write_adapter(directory, base: dict[str, torch.Tensor], targets: list[str], *, r: int = 4, alpha: float = 8.0,
                  dtype=torch.float32, seed: int = 0, rank_pattern: dict | None = None, **config) -> dict:
    """A PEFT-layout adapter over every 2-D checkpoint weight whose module name ends with a target;
    returns {module path: (A, B, scale)} for merging by hand."""
    gen = torch.Generator().manual_seed(seed)
    tensors, pairs = {}, {}
    for name, w in sorted(base.items()):
        module = name[: -len(".weight")]
        if w.dim() != 2 or not any(module.endswith("." + t) for t in targets):
            continue
        rank = next((v for k, v in (rank_pattern or {}).items() if module.endswith(k)), r)
        a = (torch.randn(rank, w.shape[1], generator=gen) * 0.1).to(dtype)
        b = (torch.randn(w.shape[0], rank, generator=gen) * 0.1).to(dtype)
        tensors[f"{PREFIX}{module}.lora_A.weight"] = a
        tensors[f"{PREFIX}{module}.lora_B.weight"] = b
        scale = alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank
        pairs[module] = (a, b, scale)
    directory.mkdir(parents=True, exist_ok=True)
    save_file(tensors, directory / "adapter_model.safetensors")
    cfg = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": r, "lora_alpha": alpha, "lora_dropout": 0.0,
           "target_modules": targets, "bias": "none", "fan_in_fan_out": False, "modules_to_save": None,
           "use_rslora": False, "rank_pattern": rank_pattern or {}, "alpha_pattern": {},
           "base_model_name_or_path": "tiny", "inference_mode": True, **config}
    (directory / "adapter_config.json").write_text(json.dumps(cfg))
    return pairs


def merged_by_hand(base_dir, pairs, out_dir):
    """A copy of the base checkpoint with W += scale * B @ A written into its tensors."""
    shutil.copytree(base_dir, out_dir)
    for file in sorted(out_dir.glob("*.safetensors")):
        with safe_open(file, framework="pt") as f:
            tensors = {k: f.get_tensor(k) for k in f.keys()}
        for module, (a, b, scale) in pairs.items():
            name = f"{module}.weight"
            if name in tensors:
                tensors[name] = tensors[name] + scale * (b.float() @ a.float())
        save_file(tensors, file)
    return out_dir


def assert_same_weights(x, y, atol=1e-6):
    sx, sy = x.model.state_dict(), y.model.state_dict()
    assert sx.keys() == sy.keys()
    for k in sx:
        assert torch.allclose(sx[k], sy[k], atol=atol, rtol=0), k


CASES = {  # family -> target_modules of its D2F-style adapter
    "llada": ["q_proj", "k_proj", "v_proj", "attn_out"],  # D2F's LLaDA student
    "dream": ["q_proj", "k_proj", "v_proj", "o_proj"],  # D2F's Dream student
    "llada2_moe": ["query_key_value", "gate_proj", "down_proj"],  # fused qkv rows, stacked experts
}


@pytest.mark.parametrize("family", sorted(CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_adapter_equals_merging_by_hand(tmp_path, family, dtype):
    base = write_tiny_checkpoint(tmp_path / "base", family, seed=5)
    pairs = write_adapter(tmp_path / "lora", read_checkpoint(base), CASES[family], dtype=dtype)
    assert pairs
    merged = merged_by_hand(base, pairs, tmp_path / "merged")
    got = dllm.load(base, adapter=tmp_path / "lora", device="cpu", dtype="float32")
    assert_same_weights(got, dllm.load(merged, device="cpu", dtype="float32"))
    plain = dllm.load(base, device="cpu", dtype="float32")
    changed = [k for k, v in got.model.state_dict().items() if not torch.equal(v, plain.model.state_dict()[k])]
    assert changed and all(any(t in k for t in ("attn", "mlp")) for k in changed)
    prompt = [[5, 6, 7, 8, 9]]
    opts = dict(gen_length=8, steps=8, block_length=8 if family != "llada2_moe" else 32)
    if family == "llada2_moe":
        opts["gen_length"] = opts["steps"] = 32
    assert (got.generate_ids(prompt, **opts).token_ids
            == dllm.load(merged, device="cpu", dtype="float32").generate_ids(prompt, **opts).token_ids)


def test_rslora_rank_pattern_and_bf16_load(tmp_path):
    base = write_tiny_checkpoint(tmp_path / "base", "dream", seed=6)
    pairs = write_adapter(tmp_path / "lora", read_checkpoint(base), ["q_proj", "v_proj"], r=4, alpha=16,
                          use_rslora=True, rank_pattern={"v_proj": 2})
    assert pairs["model.layers.0.self_attn.v_proj"][0].shape[0] == 2
    merged = merged_by_hand(base, pairs, tmp_path / "merged")
    assert_same_weights(dllm.load(base, adapter=tmp_path / "lora", device="cpu", dtype="float32"),
                        dllm.load(merged, device="cpu", dtype="float32"))
    got = dllm.load(base, adapter=tmp_path / "lora", device="cpu", dtype="bfloat16")
    want = dllm.load(merged, device="cpu", dtype="float32")
    w = "layers.0.attn.q_proj.weight"
    assert got.model.state_dict()[w].dtype == torch.bfloat16
    assert torch.equal(got.model.state_dict()[w], want.model.state_dict()[w].to(torch.bfloat16))


@pytest.fixture(scope="module")
def llada(tmp_path_factory):
    root = tmp_path_factory.mktemp("lora_errors")
    base = write_tiny_checkpoint(root / "base", "llada", seed=7)
    return base, read_checkpoint(base)


def _config(directory, **changes):
    file = directory / "adapter_config.json"
    cfg = json.loads(file.read_text())
    cfg.update(changes)
    file.write_text(json.dumps(cfg))


def test_mismatches_are_named(tmp_path, llada):
    base, tensors = llada
    # a module the base does not have (an adapter for another family)
    wrong = {k.replace("attn_out", "o_proj"): v for k, v in tensors.items()}
    write_adapter(tmp_path / "a", wrong, ["o_proj"])
    with pytest.raises(AdapterError, match=r"lora_A.weight adapts model.transformer.blocks.0.o_proj.weight.*"
                                           r"does not have.*base checkpoint it was trained on"):
        dllm.load(base, adapter=tmp_path / "a", device="cpu")
    # a wrong shape (an adapter for a bigger base)
    bigger = {k: torch.zeros(v.shape[0] * 2, v.shape[1]) if k.endswith("q_proj.weight") else v for k, v in tensors.items()}
    write_adapter(tmp_path / "b", bigger, ["q_proj"])
    with pytest.raises(AdapterError, match=r"q_proj.lora_A.weight .*gives an update of \[128, 64\], but the base's "
                                           r"model.transformer.blocks.0.q_proj.weight is \[64, 64\]"):
        dllm.load(base, adapter=tmp_path / "b", device="cpu")
    # the config's rank is not the tensors'
    write_adapter(tmp_path / "c", tensors, ["q_proj"], r=4)
    _config(tmp_path / "c", r=8)
    with pytest.raises(AdapterError, match=r"not a rank-8 pair"):
        dllm.load(base, adapter=tmp_path / "c", device="cpu")
    # a pair for a module target_modules does not name
    write_adapter(tmp_path / "d", tensors, ["q_proj", "k_proj"])
    _config(tmp_path / "d", target_modules=["q_proj"])
    with pytest.raises(AdapterError, match=r"k_proj.lora_A.weight adapts .*which target_modules \['q_proj'\] does not name"):
        dllm.load(base, adapter=tmp_path / "d", device="cpu")
    # a target with no pairs
    write_adapter(tmp_path / "e", tensors, ["q_proj"])
    _config(tmp_path / "e", target_modules=["q_proj", "v_proj"])
    with pytest.raises(AdapterError, match=r"names model.transformer.blocks.0.v_proj.weight.*no LoRA pair"):
        dllm.load(base, adapter=tmp_path / "e", device="cpu")


def test_bad_directories_and_configs(tmp_path, llada):
    base, tensors = llada
    with pytest.raises(AdapterError, match="no adapter_config.json"):
        dllm.load(base, adapter=tmp_path, device="cpu")
    write_adapter(tmp_path / "x", tensors, ["q_proj"])
    for change, message in [({"use_dora": True}, "DoRA"), ({"bias": "all"}, "bias='none'"),
                            ({"peft_type": "IA3"}, "only LoRA"), ({"r": 0}, "positive integer"),
                            ({"modules_to_save": ["lm_head"]}, "modules_to_save")]:
        write_adapter(tmp_path / "x", tensors, ["q_proj"])
        _config(tmp_path / "x", **change)
        with pytest.raises(AdapterError, match=message):
            dllm.load(base, adapter=tmp_path / "x", device="cpu")
    write_adapter(tmp_path / "y", tensors, ["q_proj"])
    extra = {f"{PREFIX}model.transformer.wte.lora_embedding_A": torch.zeros(4, 8)}
    with safe_open(tmp_path / "y" / "adapter_model.safetensors", framework="pt") as f:
        extra.update({k: f.get_tensor(k) for k in f.keys()})
    save_file(extra, tmp_path / "y" / "adapter_model.safetensors")
    with pytest.raises(AdapterError, match="lora_embedding_A is not a LoRA pair"):
        dllm.load(base, adapter=tmp_path / "y", device="cpu")
    with pytest.raises(TypeError, match="adapter must be"):
        dllm.load(base, adapter=3)


def test_cli_adapter_option(tmp_path, llada):
    base, _ = llada
    args = build_parser().parse_args(["generate", "--model", str(base), "--adapter", str(tmp_path), "hi"])
    assert args.adapter == str(tmp_path)
