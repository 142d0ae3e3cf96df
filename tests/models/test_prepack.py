"""``load(prepack=True)``: oneDNN-reordered linear weights on the CPU.

A prepacked linear computes what ``nn.Linear`` computes up to float rounding, gives each row the
same bits at any row count (so ragged batches decode the tokens of batch 1), leaves the model's
parameters and state_dict as they were, and refuses what it cannot do with an error naming the fix.
"""
from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import dllm
from dllm import GenerationConfig
from dllm.cli import main
from dllm.engine.decoding import decode
from dllm.models.prepack import PrepackedLinear, prepack_linears, prepack_refused, prepack_unavailable
from dllm.validation import OptionTypeError

REASON = prepack_unavailable()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"prepacking unavailable: {REASON}")
CPU = dict(device="cpu", dtype="float32")
# oneDNN's bfloat16 linear needs avx512 (bw, vl, dq) or avx_ne_convert; an AVX2-only CPU has neither
BF16 = pytest.param(torch.bfloat16, marks=pytest.mark.skipif(
    REASON is not None or not torch.ops.mkldnn._is_mkldnn_bf16_supported(),
    reason="this CPU has no oneDNN bfloat16 support (test_prepack_refuses_bfloat16_without_support covers it)"))
# a torch whose oneDNN gives a row other bits at another row count is refused at load
# (test_prepack_probe.py); these tests need prepacked float32 rows that keep their bits
REFUSED = None if REASON is not None else prepack_refused(torch.float32)
keeps_rows = pytest.mark.skipif(REFUSED is not None, reason=f"load(prepack=True) is refused here: {REFUSED}")


def _linear(in_features: int, out_features: int, bias: bool, dtype=torch.float32) -> nn.Linear:
    torch.manual_seed(in_features + out_features)
    return nn.Linear(in_features, out_features, bias=bias).to(dtype).requires_grad_(False)


@pytest.mark.parametrize("dtype", [torch.float32, BF16])
@pytest.mark.parametrize("bias", [False, True])
def test_prepacked_linear_computes_the_linear(dtype, bias):
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    linear = _linear(96, 300, bias, dtype)
    x = torch.randn(3, 7, 96).to(dtype)
    got = PrepackedLinear(linear)(x)
    assert got.shape == (3, 7, 300) and got.dtype == dtype
    torch.testing.assert_close(got.float(), linear(x).float(), rtol=tol, atol=tol)


@keeps_rows
@pytest.mark.parametrize("threads", [1, 4])
@pytest.mark.parametrize("dtype", [torch.float32, BF16])
@pytest.mark.parametrize("shape", [(128, 1286), (128, 512), (512, 128), (384, 16000)])
def test_a_row_has_the_same_bits_at_any_row_count(shape, dtype, threads):
    """The batch invariance the engine relies on: row r of a 1100-row call equals row r of any
    shorter call, from a refresh's hundreds of rows down to a single row, at any thread count."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        packed = PrepackedLinear(_linear(*shape, bias=False, dtype=dtype))
        x = torch.randn(1100, shape[0]).to(dtype)
        full = packed(x)
        for rows in (1, 2, 3, 5, 8, 16, 17, 31, 32, 33, 64, 160, 256, 1024):
            assert torch.equal(packed(x[:rows]), full[:rows]), rows
        assert torch.equal(packed(x[9:14]), full[9:14])
    finally:
        torch.set_num_threads(before)


@keeps_rows
def test_prepacked_model_keeps_parameters_and_ties(tiny_dirs):
    plain = dllm.load(tiny_dirs["llada"], **CPU).model
    packed = dllm.load(tiny_dirs["llada"], prepack=True, **CPU).model
    assert isinstance(packed.lm_head, PrepackedLinear) and isinstance(packed.layers[0].mlp.down_proj, PrepackedLinear)
    assert not any(isinstance(m, nn.Linear) for m in packed.modules())
    assert packed.state_dict().keys() == plain.state_dict().keys()
    assert all(torch.equal(packed.state_dict()[k], v) for k, v in plain.state_dict().items())
    tied = nn.Module()
    tied.embed = nn.Embedding(10, 4)
    tied.head = nn.Linear(4, 10, bias=False)
    tied.head.weight = tied.embed.weight
    assert prepack_linears(tied) == 1 and tied.head.weight is tied.embed.weight


@keeps_rows
@pytest.mark.parametrize("family", ["llada", "dream"])
def test_prepacked_logits_match_the_default_path(tiny_dirs, family):
    plain = dllm.load(tiny_dirs[family], **CPU).model
    packed = dllm.load(tiny_dirs[family], prepack=True, **CPU).model
    ids = torch.randint(0, 100, (2, 12))
    pos = torch.arange(12).expand(2, -1)
    with torch.no_grad():
        torch.testing.assert_close(packed(ids, pos), plain(ids, pos), rtol=1e-4, atol=1e-4)


@keeps_rows
@pytest.mark.parametrize("options", [dict(cache="none"), dict(cache="dual"), dict(cache="prefix"),
                                     dict(cache="dual", policy="threshold", policy_args={"tau": 0.9}),
                                     dict(cache="dual", strategy="lopa")])
def test_prepacked_bundled_model_decodes_ragged_batches_as_single_rows(options):
    """The bundled model, prepacked: a ragged batch gives each row's batch-1 tokens, and those
    are the default path's tokens on these prompts."""
    lm = dllm.load(prepack=True, **CPU)
    prompts = [lm.encode(p) for p in ("Sort: Lee, Ann, Bo", "Reverse the list: Kim Ray Sue Tom Ada Eve Max",
                                      "Copy: Zoe")]
    cfg = GenerationConfig(gen_length=32, block_length=8, steps=32, stop_at_eos=False, **options)
    batch = decode(lm.model, prompts, cfg).answer.tolist()
    assert batch == [decode(lm.model, [p], cfg).answer[0].tolist() for p in prompts]
    assert batch == decode(dllm.load(**CPU).model, prompts, cfg).answer.tolist()


def test_prepack_refuses_bfloat16_without_support(tiny_dirs, monkeypatch):
    """A CPU without oneDNN bfloat16 (AVX2 only) is refused before loading, naming float32."""
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    with pytest.raises(ValueError, match="bfloat16 support.*dtype='float32'"):
        dllm.load(tiny_dirs["llada"], device="cpu", dtype="bfloat16", prepack=True)


def test_prepack_refuses_what_it_cannot_do(tiny_dirs):
    with pytest.raises(ValueError, match="float32 or bfloat16"):
        dllm.load(tiny_dirs["llada"], device="cpu", dtype="float16", prepack=True)
    with pytest.raises(ValueError, match="for models on the CPU"):
        dllm.load(tiny_dirs["llada"], device="meta", prepack=True)
    with pytest.raises(OptionTypeError, match="prepack must be True or False"):
        dllm.load(tiny_dirs["llada"], prepack="yes")
    packed = PrepackedLinear(_linear(8, 4, bias=True))
    with pytest.raises(RuntimeError, match="load the model again"):
        packed(torch.randn(2, 8, dtype=torch.bfloat16))
    cast = PrepackedLinear(_linear(8, 4, bias=True)).to(torch.bfloat16)  # the copy stays float32
    with pytest.raises(RuntimeError, match="load the model again"):
        cast(torch.randn(2, 8, dtype=torch.bfloat16))
    packed.weight.requires_grad_(True)
    with pytest.raises(RuntimeError, match="for inference"):
        packed(torch.randn(2, 8))
    with torch.no_grad():
        packed(torch.randn(2, 8))


@keeps_rows
def test_cli_prepack_generates(tiny_dirs, capsys):
    model = ["--model", str(tiny_dirs["llada"]), "--device", "cpu", "--dtype", "float32"]
    gen = ["--gen-length", "8", "--block-length", "8", "--steps", "8", "--json", "Hello"]
    assert main(["generate", *model, *gen]) == 0
    plain = capsys.readouterr().out
    assert main(["generate", *model, "--prepack", *gen]) == 0
    assert json.loads(capsys.readouterr().out)["text"] == json.loads(plain)["text"]
    assert main(["generate", *model, "--prepack", "--dtype", "float16", *gen]) == 2
    assert "float32 or bfloat16" in capsys.readouterr().err


@keeps_rows
def test_memory_plan_counts_the_reordered_copies(tiny_dirs):
    from dllm.engine.memory import model_bytes

    plain = dllm.load(tiny_dirs["llada"], **CPU).model
    packed = dllm.load(tiny_dirs["llada"], prepack=True, **CPU).model
    linear_bytes = sum(m.weight.numel() * 4 for m in plain.modules() if isinstance(m, nn.Linear))
    assert model_bytes(packed) >= model_bytes(plain) + linear_bytes  # oneDNN's layout may pad


@keeps_rows
def test_compiled_prepacked_forward_gives_the_eager_tokens(monkeypatch):
    """compile=True on a prepacked model (aot_eager: graph capture, no code generation)."""
    from dllm.runner.compiled import compile_available

    if compile_available() is not None:
        pytest.skip(compile_available())
    monkeypatch.setenv("DLLM_COMPILE_BACKEND", "aot_eager")
    torch._dynamo.reset()
    lm = dllm.load(prepack=True, **CPU)
    prompts = [lm.encode("Sort: Lee, Ann, Bo"), lm.encode("Copy: Zoe")]
    cfg = dict(gen_length=16, block_length=8, steps=16, cache="dual", stop_at_eos=False)
    eager = decode(lm.model, prompts, GenerationConfig(**cfg)).answer
    try:
        compiled = decode(lm.model, prompts, GenerationConfig(compile=True, **cfg)).answer
    finally:
        torch._dynamo.reset()
    assert torch.equal(compiled, eager)


def test_every_model_loading_command_takes_prepack_and_the_load_generator_passes_it(tmp_path, monkeypatch):
    from dllm.bench import serve_load
    from dllm.cli import build_parser

    parser = build_parser()
    commands = [["generate", "x"], ["chat"], ["serve"], ["train-filter", "--out", "o"],
                ["bench", "parallelbench", "--out", "o"], ["bench", "throughput", "--prompts", "p", "--out", "o"],
                ["bench", "serve", "--out", "o"]]
    for argv in commands:
        assert parser.parse_args([*argv, "--prepack"]).prepack is True, argv

    class Started(Exception):
        pass

    def popen(cmd, **kwargs):
        raise Started(cmd)

    monkeypatch.setattr(serve_load.subprocess, "Popen", popen)
    with pytest.raises(Started) as started:
        serve_load.ServerProcess(None, continuous=True, max_batch=2, max_queue=4, log_path=tmp_path / "log",
                                 prepack=True)
    assert "--prepack" in started.value.args[0]
