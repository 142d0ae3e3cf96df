"""``load(..., quantize="int8" | "float8")``: weight-only quantized linears through torchao.

The weights are read as usual (float32 / bfloat16 / float16), then every ``nn.Linear`` except the
LM head gets a torchao quantized weight in place (``torchao.quantization.quantize_``):

* ``"int8"``: weight-only int8, one symmetric scale per output row (``Int8WeightOnlyConfig``,
  per-row). Any device: the forward casts the int8 weight to the activation dtype and runs the
  same ``torch.mm`` as ``nn.Linear``, then scales the output rows, so a row's bits depend on the
  row count exactly as the unquantized GEMM's do (``tests/models/test_quantize.py`` checks that
  ragged batches still decode the tokens of batch 1).
* ``"float8"``: weight-only float8 (e4m3, one scale per row; ``Float8WeightOnlyConfig``), on
  NVIDIA GPUs of compute capability 8.9 or newer (Ada, Hopper, Blackwell) only; refused
  elsewhere with the fix named.

Kept in the load dtype: the LM head (its logits rank the tokens every step commits, and on large
vocabularies it is a few percent of the weights; transformers, bitsandbytes and vLLM's quantizers
keep it too), the MoE routers (a few KB that pick the experts; LLaDA2 scores them in float32, and
vLLM leaves MoE gates unquantized too), embeddings and norms (not linears), and MoE experts
(stacked parameters, not ``nn.Linear``). The weights are quantized at load: the checkpoint on disk stays a float one.

Checkpoints that are already quantized (a config.json ``quantization_config``: GPTQ, AWQ,
compressed-tensors, fp8, bitsandbytes, ...; or tensors stored as float8 / integers) are refused
before any weight is read, naming what dllm loads instead: their packed weights need the
format's own kernels and scales, and reading them as plain floats would decode garbage.

The memory plan counts a quantized weight at its stored size (data plus scales,
``tensor_bytes``) and adds the largest dequantized weight a forward materialises
(``dequant_workspace_bytes``).
"""
from __future__ import annotations

import json
import logging
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import torch
from torch import nn

from dllm.validation import OptionTypeError

QUANTIZE_CHOICES = ("int8", "float8")
KEPT_MODULES = ("lm_head", "router")  # module names left in the load dtype (see the module docstring)
FLOAT8_CAPABILITY = (8, 9)
FLOAT_STORAGE = {"F32", "F16", "BF16", "F64"}  # safetensors dtypes dllm reads as plain weights
INSTALL = "pip install 'dllm[quant]' (torchao)"


class QuantizedCheckpointError(ValueError):
    """A checkpoint stored in a quantized format dllm does not load; the message names what it loads."""


@contextmanager
def quiet_torchao() -> Iterator[None]:
    """torchao's import logs a warning for each CUDA extension a CPU build cannot load, and torch
    one about an Enum it registers: noise for a user who asked for int8 on the CPU (or for a
    helper, whose transformers imports torchao)."""
    loggers = [logging.getLogger(name) for name in ("torchao", "torch.utils._pytree")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def torchao_unavailable() -> str | None:
    """None when torchao imports here, else why not."""
    try:
        with quiet_torchao():
            import torchao.quantization  # noqa: F401
    except Exception as err:  # ImportError, or a torchao built for another torch
        return f"torchao does not import ({type(err).__name__}: {err})"
    return None


def check_quantize(quantize: object, device: torch.device, *, prepack: bool = False) -> str | None:
    """The quantization asked for (None: none), refused with the fix named before any weight is read."""
    if quantize is None:
        return None
    if not isinstance(quantize, str):
        raise OptionTypeError(f"quantize must be one of {list(QUANTIZE_CHOICES)} or None, got {quantize!r}")
    mode = quantize.strip().lower()
    if mode in ("", "none"):
        return None
    if mode not in QUANTIZE_CHOICES:
        raise ValueError(f"quantize={quantize!r} is not supported; use one of {list(QUANTIZE_CHOICES)} "
                         "(int8: weight-only int8 on any device; float8: NVIDIA GPUs of compute capability 8.9+)")
    if prepack:
        raise ValueError(f"prepack=True and quantize={mode!r} both replace the linear weights; pick one "
                         "(prepack: faster float GEMMs on the CPU; quantize: smaller weights)")
    if mode == "float8":
        if device.type != "cuda":
            raise ValueError(f"quantize='float8' needs an NVIDIA GPU of compute capability 8.9 or newer (Ada, Hopper, "
                             f"Blackwell), and the device is {device}; use quantize='int8' there (any device)")
        capability = torch.cuda.get_device_capability(device)
        if capability < FLOAT8_CAPABILITY:
            name = torch.cuda.get_device_name(device)
            raise ValueError(f"quantize='float8' needs compute capability 8.9 or newer, and {device} ({name}) has "
                             f"{capability[0]}.{capability[1]}; use quantize='int8' on this GPU")
    reason = torchao_unavailable()
    if reason is not None:
        raise ValueError(f"quantize={mode!r} runs on torchao, and {reason}; {INSTALL}, or load without quantize")
    return mode


def _safetensors_dtypes(path: Path) -> dict[str, tuple[str, Path]]:
    """Stored dtype of every tensor of the checkpoint's safetensors files (headers only)."""
    from safetensors import safe_open

    found: dict[str, tuple[str, Path]] = {}
    for file in sorted(path.glob("*.safetensors")):
        try:
            with safe_open(str(file), framework="pt") as f:
                for name in f.keys():
                    found[name] = (f.get_slice(name).get_dtype(), file)
        except Exception:  # a damaged file is the loader's to report, with its own message
            continue
    return found


def _raw_config(path: Path) -> dict:
    try:
        raw = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):  # missing or damaged: the loader reports it, with its own message
        return {}
    return raw if isinstance(raw, dict) else {}


def check_checkpoint_unquantized(path: Path) -> None:
    """Refuse a checkpoint whose weights are stored quantized (before any weight is read): a
    config.json ``quantization_config``, or safetensors tensors stored as non-float data."""
    qc = _raw_config(path).get("quantization_config")
    loads = ("dllm loads unquantized checkpoints (float32 / bfloat16 / float16 safetensors) and quantizes them "
             "itself at load: quantize='int8' (--quantize int8; any device) or quantize='float8' (NVIDIA GPUs of "
             "compute capability 8.9+). Load the unquantized checkpoint this one was made from, with quantize=")
    if qc is not None:
        method = qc.get("quant_method", "unknown") if isinstance(qc, dict) else "unknown"
        bits = f", {qc['bits']}-bit" if isinstance(qc, dict) and "bits" in qc else ""
        raise QuantizedCheckpointError(
            f"{path / 'config.json'} declares a quantized checkpoint (quantization_config quant_method={method!r}{bits}): "
            f"its packed weights need that format's own kernels and scales, which dllm does not have. {loads}")
    stored = {name: info for name, info in _safetensors_dtypes(path).items() if info[0] not in FLOAT_STORAGE}
    if stored:
        name, (dtype, file) = sorted(stored.items())[0]
        raise QuantizedCheckpointError(
            f"{file} stores {len(stored)} tensor(s) as non-float data (e.g. {name}: {dtype}) and config.json declares "
            f"no quantization dllm could undo; read as plain floats they would decode garbage. {loads}")


def _torchao_config(mode: str):
    with quiet_torchao():
        from torchao.quantization import Float8WeightOnlyConfig, Int8WeightOnlyConfig
        from torchao.quantization.granularity import PerRow
    if mode == "int8":  # set_inductor_config=False: leave torch's global compiler settings alone
        return Int8WeightOnlyConfig(granularity=PerRow(), set_inductor_config=False)
    return Float8WeightOnlyConfig(set_inductor_config=False)


def quantize_linears(model: nn.Module, mode: str) -> int:
    """Quantize every ``nn.Linear`` of ``model`` but the kept ones (in place); returns how many."""
    with quiet_torchao():
        from torchao.quantization import quantize_

    chosen = {fqn for fqn, m in model.named_modules()
              if isinstance(m, nn.Linear) and fqn.rsplit(".", 1)[-1] not in KEPT_MODULES}
    quantize_(model, _torchao_config(mode), filter_fn=lambda m, fqn: fqn in chosen)
    model.requires_grad_(False)
    model.quantization = mode  # read by results records (``quantization_of``)
    return len(chosen)


def quantization_of(model: nn.Module) -> str | None:
    """The ``quantize`` mode a model was loaded with (None: none)."""
    return getattr(model, "quantization", None)


def _is_wrapper(t: torch.Tensor) -> bool:
    return type(t) not in (torch.Tensor, nn.Parameter) and hasattr(t, "__tensor_flatten__")


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes a tensor holds: a tensor subclass that wraps others (torchao's quantized weights:
    int8 / float8 data plus scales) counts what it wraps, not numel x its nominal dtype."""
    if _is_wrapper(t):
        names, _ = t.__tensor_flatten__()
        return sum(tensor_bytes(getattr(t, n)) for n in names if getattr(t, n, None) is not None)
    return t.numel() * t.element_size()


def dequant_workspace_bytes(model: nn.Module) -> int:
    """The largest weight a quantized linear's forward casts back to the activation dtype
    (torchao's weight-only linears do, one linear at a time)."""
    sizes = [m.weight.numel() * m.weight.element_size() for m in model.modules()
             if isinstance(m, nn.Linear) and _is_wrapper(m.weight)]
    return max(sizes, default=0)
