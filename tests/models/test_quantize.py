"""``load(quantize="int8" | "float8")``: weight-only quantized linears through torchao.

An int8 model computes the float model whose weights are the dequantized int8 ones (up to float
rounding), stays within int8's rounding of the float32 logits, decodes ragged batches as single
rows, answers the demo prompt as the float32 model does, and is counted at its stored size by the
memory plan. float8 runs only where the GPU has it; checkpoints stored quantized are refused.
"""
from __future__ import annotations

import json
from unittest import mock

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

import dllm
from dllm import GenerationConfig
from dllm.cli import main
from dllm.cli.demo import PROMPT
from dllm.engine.decoding import decode
from dllm.engine.memory import MemoryBudgetError, MIB, model_bytes, plan_memory
from dllm.models.quantize import KEPT_MODULES, QuantizedCheckpointError, tensor_bytes, torchao_unavailable
from dllm.validation import OptionTypeError

CPU = dict(device="cpu", dtype="float32")
PROMPTS = ("Sort: Lee, Ann, Bo", "Reverse the list: Kim Ray Sue Tom Ada Eve Max", "Copy: Zoe")
# torchao is an optional extra (quant): where it does not import (absent, or built for another torch),
# what runs on it is skipped, naming why; the refusals before it is needed still run
NO_TORCHAO = torchao_unavailable()
needs_torchao = pytest.mark.skipif(NO_TORCHAO is not None, reason=f"{NO_TORCHAO}; pip install -e '.[quant]'")


def _logits(model, ids):
    pos = torch.arange(ids.shape[1]).expand(ids.shape[0], -1)
    with torch.no_grad():
        return model(ids, pos)


@pytest.mark.parametrize("family", ["llada", "dream"])
@needs_torchao
def test_int8_logits_are_the_dequantized_weights_and_near_float32(tiny_dirs, family):
    """Two tolerances. (1) The int8 model against the float32 model holding its dequantized
    weights (int8 x row scale): the same products in another order (the scale applied after the
    GEMM), so float32 rounding, 1e-4. (2) Against the original float32 weights: per-row
    symmetric int8 moves each weight by at most half a step (max|row| / 254, 0.4% of the row's
    largest weight); through the tiny random checkpoints' 2 layers that moved the logits by at
    most 3% of their largest magnitude (0.18 and 0.23 of 5.7 and 7.2), so 5% is asserted, and the
    top-1 token at 90% of positions or more."""
    plain = dllm.load(tiny_dirs[family], **CPU).model
    quant = dllm.load(tiny_dirs[family], quantize="int8", **CPU).model
    linears = [n for n, m in quant.named_modules() if isinstance(m, nn.Linear)]
    kept = [n for n in linears if n.rsplit(".", 1)[-1] in KEPT_MODULES]
    assert kept == ["lm_head"] and all(type(quant.get_submodule(n).weight).__name__ == "Int8Tensor"
                                       for n in linears if n not in kept)
    fake = dllm.load(tiny_dirs[family], **CPU).model  # float32, weights = dequantized int8
    for name in linears:
        if name not in kept:
            fake.get_submodule(name).weight.copy_(quant.get_submodule(name).weight.dequantize())
    ids = torch.randint(0, 100, (2, 12), generator=torch.Generator().manual_seed(0))
    got, want, ref = _logits(quant, ids), _logits(fake, ids), _logits(plain, ids)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert (got - ref).abs().max() <= 0.05 * ref.abs().max()
    assert (got.argmax(-1) == ref.argmax(-1)).float().mean() >= 0.9


@pytest.mark.parametrize("options", [dict(), dict(cache="dual"),
                                     dict(cache="dual", policy="threshold", policy_args={"tau": 0.9}),
                                     dict(cache="prefix", strategy="lopa")])
@needs_torchao
def test_int8_ragged_batch_equals_single_rows(tiny_dirs, test_device, options):
    """torchao's int8 linear runs ``torch.mm`` on the weight cast to the activation dtype, then
    scales the output rows: a row's bits depend on the row count only as the float GEMM's do,
    so a ragged batch gives each row its batch-1 tokens, as unquantized."""
    lm = dllm.load(tiny_dirs["llada"], device=test_device, dtype="float32", quantize="int8")
    prompts = [lm.encode(p, chat=False) for p in PROMPTS]
    cfg = GenerationConfig(gen_length=16, block_length=8, steps=16, stop_at_eos=False, **options)
    batch = decode(lm.model, prompts, cfg).answer.tolist()
    assert batch == [decode(lm.model, [p], cfg).answer[0].tolist() for p in prompts]


@needs_torchao
def test_int8_decode_replays_from_cuda_graphs_as_eager(tiny_dirs, test_device, monkeypatch):
    """An int8 model's forwards replay (capture emulated on CPU, real on CUDA) with eager's tokens:
    its quantized weights hold no storage of their own, and the emulation still checks each
    replay reads the weights its capture read."""
    import weakref

    from dllm.runner import graphs

    if test_device == "cpu":
        monkeypatch.setattr(graphs, "BACKEND", graphs.EmulatedGraph)
    monkeypatch.setattr(graphs, "_RUNNERS", weakref.WeakKeyDictionary())
    lm = dllm.load(tiny_dirs["llada"], device=test_device, dtype="float32", quantize="int8")
    prompts = [lm.encode(p, chat=False) for p in PROMPTS]
    cfg = dict(gen_length=16, block_length=8, steps=16, stop_at_eos=False, cache="dual")
    eager = decode(lm.model, prompts, GenerationConfig(**cfg)).answer
    replayed = decode(lm.model, prompts, GenerationConfig(**cfg, cuda_graphs=True)).answer
    assert torch.equal(eager, replayed) and graphs.graph_stats(lm.model)["replays"] > 0


@needs_torchao
def test_moe_model_int8_keeps_its_routers_and_decodes_ragged_batches_as_single_rows():
    """The bundled LLaDA2 MoE model: its routers stay float (LLaDA2 scores them in float32), the
    dense linears are int8, and a ragged batch gives each row its batch-1 tokens."""
    lm = dllm.load("dllm-waitingline-moe", quantize="int8", **CPU)
    routers = [m for name, m in lm.model.named_modules() if name.endswith(".router")]
    assert routers and all(type(m.weight) is torch.nn.Parameter for m in routers)
    prompts = [lm.encode(p) for p in (PROMPT, "Reverse: [\"Ann Lee\", \"Bo Kim\"]")]
    cfg = GenerationConfig(gen_length=32, block_length=8, policy="threshold", policy_args={"tau": 0.9}, cache="dual")
    batch = decode(lm.model, prompts, cfg).answer.tolist()
    assert batch == [decode(lm.model, [p], cfg).answer[0].tolist() for p in prompts]


@needs_torchao
def test_bundled_model_int8_answers_the_demo_prompt_as_float32():
    plain, quant = dllm.load(**CPU), dllm.load(quantize="int8", **CPU)
    for options in (dict(gen_length=32, steps=32),
                    dict(gen_length=32, block_length=8, policy="threshold", policy_args={"tau": 0.9}, cache="dual")):
        want = plain.generate(PROMPT, **options).texts[0]
        assert want == '["Emma Stone", "Billy Ramos", "Alan Wells", "Grace Wright"]'
        assert quant.generate(PROMPT, **options).texts[0] == want


@needs_torchao
def test_memory_plan_counts_stored_bytes_and_the_budget_admits_what_fits(tiny_dirs):
    plain = dllm.load(tiny_dirs["llada"], **CPU).model
    quant = dllm.load(tiny_dirs["llada"], quantize="int8", **CPU).model
    q = quant.layers[0].mlp.up_proj.weight
    inner = [q.qdata, q.scale] + ([q.zero_point] if q.zero_point is not None else [])
    assert tensor_bytes(q) == sum(t.numel() * t.element_size() for t in inner) < q.numel() * 4 / 3
    linear = sum(m.weight.numel() for n, m in plain.named_modules() if isinstance(m, nn.Linear) and n != "lm_head")
    assert model_bytes(plain) - model_bytes(quant) >= linear * 3 - linear * 4 // 16  # 4 -> 1 byte, scales < 1/16
    cfg = GenerationConfig(gen_length=16, block_length=8, steps=16)
    small, big = plan_memory(quant, 1, 24, cfg), plan_memory(plain, 1, 24, cfg)
    assert small.total_bytes < big.total_bytes
    budget = dict(memory_budget_mb=(small.total_bytes + big.total_bytes) / 2 / MIB)
    ids = [[5, 6, 7, 8, 9, 10, 11, 12]]
    decode(quant, ids, GenerationConfig(gen_length=16, block_length=8, steps=16, **budget))
    with pytest.raises(MemoryBudgetError):
        decode(plain, ids, GenerationConfig(gen_length=16, block_length=8, steps=16, **budget))


def test_float8_runs_on_gpus_that_have_it_and_is_refused_elsewhere(tiny_dirs, test_device):
    device = torch.device(test_device)
    has_float8 = device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 9)
    if not has_float8:
        with pytest.raises(ValueError, match=r"compute capability 8\.9.*quantize='int8'"):
            dllm.load(tiny_dirs["llada"], device=test_device, quantize="float8")
        return
    if NO_TORCHAO is not None:
        pytest.skip(f"{NO_TORCHAO}; pip install -e '.[quant]'")
    lm = dllm.load(tiny_dirs["llada"], device=test_device, dtype="bfloat16", quantize="float8")
    assert type(lm.model.layers[0].mlp.up_proj.weight).__name__ == "Float8Tensor"
    prompts = [lm.encode(p, chat=False) for p in PROMPTS]
    cfg = GenerationConfig(gen_length=16, block_length=8, steps=16, stop_at_eos=False)
    batch = decode(lm.model, prompts, cfg).answer.tolist()
    assert batch == [decode(lm.model, [p], cfg).answer[0].tolist() for p in prompts]
    assert model_bytes(lm.model) < model_bytes(dllm.load(tiny_dirs["llada"], device=test_device,
                                                         dtype="bfloat16").model)


@needs_torchao
def test_float8_quantizes_each_kept_linear_to_e4m3_with_one_scale_a_row(tiny_dirs):
    """The quantization a float8 load runs after its GPU check, run here on CPU weights (torchao
    converts them anywhere; only the check needs a GPU): every linear but the LM head holds
    float8 e4m3 values and one float32 scale per output row (1 byte a weight plus 4 a row), and
    the forward stays within e4m3's rounding of the float one. A GPU session was the only place
    a changed torchao config (per-tensor scales, e5m2) or a dropped linear could show."""
    from dllm.models.quantize import dequant_workspace_bytes, quantize_linears

    model = dllm.load(tiny_dirs["llada"], device="cpu", dtype="bfloat16").model
    ids = torch.tensor([[5, 6, 7, 8, 9, 10], [11, 12, 13, 14, 15, 16]])
    positions = torch.arange(6)[None].expand(2, 6)
    with torch.inference_mode():
        plain = model(ids, positions).float()
    linears = {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    assert quantize_linears(model, "float8") == len(linears) - 1 and model.quantization == "float8"
    for name, linear in linears.items():
        w = linear.weight
        if name.rsplit(".", 1)[-1] in KEPT_MODULES:
            assert type(w) is nn.Parameter and w.dtype == torch.bfloat16, name
            continue
        rows, cols = w.shape
        assert w.qdata.dtype == torch.float8_e4m3fn and w.scale.shape == (rows, 1), name
        assert tensor_bytes(w) == rows * cols + rows * 4, name
    assert dequant_workspace_bytes(model) == max(m.weight.numel() for m in linears.values()
                                                 if type(m.weight) is not nn.Parameter) * 2  # cast back to bfloat16
    with torch.inference_mode():
        quant = model(ids, positions).float()
    error = (quant - plain).abs().max() / plain.abs().max()
    assert 0 < error < 0.15, error  # quantized (not the float weights), within e4m3's 3 mantissa bits


@pytest.mark.parametrize("capability, name", [((8, 0), "NVIDIA A100-SXM4-80GB"), ((7, 5), "Tesla T4")])
def test_float8_refused_on_gpus_before_ada_naming_the_gpu(monkeypatch, capability, name):
    """The CUDA branch of the check, without a GPU: a GPU under compute capability 8.9 is refused
    by its name and capability, with int8 as the fix; 8.9 and 9.0 pass the check."""
    from dllm.models import quantize

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    monkeypatch.setattr(quantize, "torchao_unavailable", lambda: None)
    cuda = torch.device("cuda", 0)
    with pytest.raises(ValueError, match=rf"\({name}\) has {capability[0]}\.{capability[1]}; use quantize='int8'"):
        quantize.check_quantize("float8", cuda)
    for newer in ((8, 9), (9, 0)):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None, newer=newer: newer)
        assert quantize.check_quantize("float8", cuda) == "float8"


def test_float8_refused_on_the_cpu_naming_the_fix(tiny_dirs):
    with pytest.raises(ValueError, match=r"needs an NVIDIA GPU of compute capability 8\.9.*device is cpu.*'int8'"):
        dllm.load(tiny_dirs["llada"], device="cpu", quantize="float8")


def test_bad_quantize_options_are_refused(tiny_dirs):
    with pytest.raises(ValueError, match=r"quantize='int4' is not supported; use one of \['int8', 'float8'\]"):
        dllm.load(tiny_dirs["llada"], device="cpu", quantize="int4")
    with pytest.raises(OptionTypeError, match="quantize must be one of"):
        dllm.load(tiny_dirs["llada"], device="cpu", quantize=8)
    with pytest.raises(ValueError, match="pick one"):
        dllm.load(tiny_dirs["llada"], device="cpu", prepack=True, quantize="int8")


def _copy_checkpoint(src, dst, config_update=None):
    dst.mkdir()
    for file in src.iterdir():
        (dst / file.name).write_bytes(file.read_bytes())
    if config_update is not None:
        config = json.loads((dst / "config.json").read_text())
        (dst / "config.json").write_text(json.dumps(config | config_update))
    return dst


@pytest.mark.parametrize("method", ["gptq", "awq", "compressed-tensors", "fp8", "bitsandbytes"])
def test_checkpoints_stored_quantized_are_refused(tiny_dirs, tmp_path, method):
    qc = {"quant_method": method, "bits": 4, "group_size": 128} if method in ("gptq", "awq") else {"quant_method": method}
    path = _copy_checkpoint(tiny_dirs["llada"], tmp_path / method, {"quantization_config": qc})
    for quantize in (None, "int8"):
        with pytest.raises(QuantizedCheckpointError,
                           match=rf"quant_method='{method}'.*dllm loads unquantized checkpoints.*quantize='int8'"):
            dllm.load(path, device="cpu", quantize=quantize)


def test_float8_tensors_without_a_quantization_config_are_refused(tiny_dirs, tmp_path):
    """Stored float8 weights cast to float32 without their scales would decode garbage."""
    from safetensors.torch import load_file

    path = _copy_checkpoint(tiny_dirs["llada"], tmp_path / "fp8")
    file = sorted(path.glob("*.safetensors"))[0]
    tensors = load_file(file)
    name = next(n for n in sorted(tensors) if n.endswith("proj.weight") or "ff_proj" in n or "att_proj" in n)
    tensors[name] = tensors[name].to(torch.float8_e4m3fn)
    save_file(tensors, file)
    with pytest.raises(QuantizedCheckpointError, match=rf"non-float data \(e\.g\. {name}: F8_E4M3\)"):
        dllm.load(path, device="cpu")


@needs_torchao
def test_cli_quantize_generates_and_every_command_takes_it(tiny_dirs, capsys, tmp_path, monkeypatch):
    from dllm.bench import serve_load
    from dllm.cli import build_parser
    from dllm.eval.model_args import parse_model_args

    model = ["--model", str(tiny_dirs["llada"]), "--device", "cpu", "--dtype", "float32"]
    gen = ["--gen-length", "8", "--block-length", "8", "--steps", "8", "--json", "Hello"]
    assert main(["generate", *model, "--quantize", "int8", *gen]) == 0
    assert isinstance(json.loads(capsys.readouterr().out)["text"], str)
    assert main(["generate", *model, "--quantize", "float8", *gen]) == 2
    assert "compute capability 8.9" in capsys.readouterr().err
    parser = build_parser()
    for argv in (["generate", "x"], ["chat"], ["serve"], ["train-filter", "--out", "o"],
                 ["bench", "parallelbench", "--out", "o"], ["bench", "throughput", "--prompts", "p", "--out", "o"],
                 ["bench", "serve", "--out", "o"]):
        assert parser.parse_args([*argv, "--quantize", "int8"]).quantize == "int8", argv
    assert parse_model_args({"quantize": "int8"})[0].quantize == "int8"

    popen = mock.Mock(side_effect=RuntimeError("not started in tests"))
    monkeypatch.setattr(serve_load.subprocess, "Popen", popen)
    with pytest.raises(RuntimeError, match="not started"):
        serve_load.ServerProcess(None, continuous=True, max_batch=2, max_queue=4, log_path=tmp_path / "log",
                                 quantize="int8")
    cmd = popen.call_args.args[0]
    assert cmd[cmd.index("--quantize") + 1] == "int8"
