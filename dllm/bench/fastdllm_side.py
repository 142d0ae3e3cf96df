"""dllm side by side with Fast-dLLM's own LLaDA loops on the same weights, interleaved.

Fast-dLLM (github.com/NVlabs/Fast-dLLM) is never copied here: the ``llada`` folder of a checkout
the user names is put on ``sys.path`` and its ``generate.py`` (``generate``,
``generate_with_prefix_cache``, ``generate_with_dual_cache``) and ``model/modeling_llada.py``
imported from there. Its model receives dllm's tensors under their original checkpoint names, so
both sides compute with the same weights. Each side runs once to warm up, then the two alternate
``reps`` times (A B A B ...), each run and its model's forwards timed. Used by the GPU check (a
random LLaDA of a real shape on the device, ``FASTDLLM_DIR``) and by ``bench/fastdllm_compare.py``
(a random checkpoint on the CPU).
"""
from __future__ import annotations

import importlib
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import torch

from dllm.bench.forward_timer import ForwardTimer

# cache mode -> Fast-dLLM's loop for it
LOOPS = {"none": "generate", "prefix": "generate_with_prefix_cache", "dual": "generate_with_dual_cache"}
# LLaDA-8B's config.json keys that the dllm shapes leave implicit (dllm always rotates; Fast-dLLM
# reads rope=true from the published config)
LLADA_ARCH = {"model_type": "llada", "mlp_ratio": 4, "rope": True, "rope_full_precision": True, "rms_norm_eps": 1e-5,
              "weight_tying": False, "include_bias": False, "include_qkv_bias": False, "block_type": "llama",
              "activation_type": "silu", "layer_norm_type": "rms", "use_cache": False}


def llada_folder(path: Path) -> Path:
    """The ``llada`` folder of a Fast-dLLM checkout given it or the checkout's root; an error
    naming what is missing otherwise."""
    for folder in (path, path / "llada"):
        if (folder / "generate.py").is_file() and (folder / "model" / "modeling_llada.py").is_file():
            return folder
    raise ValueError(f"{path}: not a Fast-dLLM checkout (expected llada/generate.py and "
                     "llada/model/modeling_llada.py under it, or the llada folder itself)")


# what Fast-dLLM's LLaDA loops and model import beyond dllm's own dependencies
FASTDLLM_MODULES = {"einops": "einops", "numpy": "numpy", "transformers": "transformers"}


def check_fastdllm_imports() -> None:
    """Name every module Fast-dLLM's LLaDA code needs that does not import (before any model work)."""
    missing = []
    for module, package in FASTDLLM_MODULES.items():
        try:
            importlib.import_module(module)
        except ImportError as err:
            missing.append(f"{module} (pip package {package!r}: {err})")
    if missing:
        raise ValueError(f"Fast-dLLM's LLaDA code imports {', '.join(missing)}; install them or unset FASTDLLM_DIR")


def import_fastdllm(folder: Path):
    """Fast-dLLM's ``generate``, ``model.modeling_llada`` and ``model.configuration_llada``."""
    folder = llada_folder(folder)
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    return (importlib.import_module("generate"), importlib.import_module("model.modeling_llada"),
            importlib.import_module("model.configuration_llada"))


def checkout_commit(folder: Path) -> str | None:
    """The git commit of the Fast-dLLM checkout (what a result names instead of a local path)."""
    done = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or None if done.returncode == 0 else None


def fastdllm_model(folder: Path, config: dict, state: dict[str, torch.Tensor], *, device: torch.device,
                   dtype: torch.dtype):
    """Fast-dLLM's LLaDA model of ``config`` (a LLaDA config.json) holding ``state`` (tensors by
    their original checkpoint names), built on ``device`` in ``dtype``. Refuses a state it does
    not take."""
    _, modeling, configuration = import_fastdllm(folder)
    cfg = configuration.LLaDAConfig(**{**config, "rope": True})
    cfg.use_cache = False  # transformers 5 configs no longer default it; the loops pass use_cache
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # built in dtype: an 8B model never exists in float32
    try:
        with torch.device(device):
            model = modeling.LLaDAModelLM(cfg, init_params=False)
    finally:
        torch.set_default_dtype(default)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or [m for m in missing if "rotary" not in m]:
        raise ValueError(f"Fast-dLLM's model does not take the weights: missing {missing}, unexpected {unexpected}")
    return model.to(device=device, dtype=dtype).eval()


def rotate(runners: dict[str, tuple[torch.nn.Module, Callable]], reps: int, sync: Callable[[], None] = lambda: None):
    """Run every side once (warm-up), then ``reps`` rotations in order (each dllm variant, then
    ``"fastdllm"``), timing each run and its model's forwards (``sync`` waits for the device).
    Returns per side the run times, the forward times and the NFE, and per dllm variant whether
    its tokens always equalled Fast-dLLM's."""
    for _, runner in runners.values():
        runner()
    seconds = {side: [] for side in runners}
    forward_s = {side: [] for side in runners}
    tokens, nfe = {}, {}
    variants = [side for side in runners if side != "fastdllm"]
    same = dict.fromkeys(variants, True)
    for _ in range(reps):
        for side, (model, runner) in runners.items():
            with ForwardTimer(model) as timer:
                sync()
                start = time.perf_counter()
                tokens[side], nfe[side] = runner()
                sync()
                seconds[side].append(time.perf_counter() - start)
            forward_s[side].append(sum(r.seconds for r in timer.records()))
        for variant in variants:
            same[variant] &= torch.equal(tokens[variant].cpu(), tokens["fastdllm"].cpu())
    return seconds, forward_s, nfe, same


def comparison(variant: str, tokens: int, seconds: dict, forward_s: dict, nfe: dict, same: bool) -> dict:
    """One dllm variant against Fast-dLLM: tokens/s (``tokens`` per run), per-pair speedups,
    forward shares."""
    ours_s, ours_f = seconds[variant], forward_s[variant]
    theirs_s, theirs_f = seconds["fastdllm"], forward_s["fastdllm"]
    ratios = [b / a for a, b in zip(ours_s, theirs_s)]
    return {"nfe_dllm": nfe[variant], "nfe_fastdllm": nfe["fastdllm"], "tokens_identical": bool(same),
            "dllm_tokens_per_s": tokens / statistics.median(ours_s),
            "fastdllm_tokens_per_s": tokens / statistics.median(theirs_s),
            "speedup_median": statistics.median(ratios), "speedup_min": min(ratios), "speedup_max": max(ratios),
            "dllm_in_forwards": statistics.median(f / t for f, t in zip(ours_f, ours_s)),
            "fastdllm_in_forwards": statistics.median(f / t for f, t in zip(theirs_f, theirs_s)),
            "forward_speedup": statistics.median(b / a for a, b in zip(ours_f, theirs_f)),
            "dllm_seconds": ours_s, "fastdllm_seconds": theirs_s,
            "dllm_forward_seconds": ours_f, "fastdllm_forward_seconds": theirs_f}


def side_by_side(folder: Path, model, shape: str, *, batch: int, prompt_length: int, gen_length: int,
                 block_length: int, reps: int, tokens_per_step: int = 4,
                 caches: tuple[str, ...] = tuple(LOOPS)) -> dict:
    """``model`` (a random model of LLaDA shape ``shape``, as ``build_random_model`` makes it),
    decoded by dllm (eager) and by Fast-dLLM's loop of each cache on a copy of its weights,
    top-k with ``tokens_per_step`` tokens a step, interleaved."""
    from dllm.bench.gpu_measure import Shape, random_prompts
    from dllm.bench.random_models import SHAPES, shape_config
    from dllm.engine.config import GenerationConfig
    from dllm.engine.decoding import decode
    from dllm.models.registry import FAMILIES, tensor_sources
    from dllm.models.sources import to_checkpoint

    family, raw = SHAPES[shape]
    if family != "llada":
        raise ValueError(f"Fast-dLLM's loops here are its LLaDA ones; {shape} is a {family} shape")
    if gen_length % block_length or block_length % tokens_per_step:
        raise ValueError(f"gen_length {gen_length} must be a multiple of block_length {block_length}, and "
                         f"block_length of {tokens_per_step} tokens per step")
    generate = import_fastdllm(folder)[0]
    device, dtype = model.device, model.dtype
    state = to_checkpoint(tensor_sources(FAMILIES[family], shape_config(shape)), model.state_dict())
    theirs = fastdllm_model(folder, {**LLADA_ARCH, **raw}, state, device=device, dtype=dtype)
    del state
    prompts = random_prompts(model, Shape(batch, prompt_length, gen_length, block_length))
    x = torch.tensor(prompts, device=device)
    steps = gen_length // tokens_per_step
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    rows = []
    for cache in caches:
        config = GenerationConfig(gen_length=gen_length, block_length=block_length, cache=cache, steps=steps,
                                  policy="low_confidence", stop_at_eos=False)
        loop = getattr(generate, LOOPS[cache])

        def ours():
            out = decode(model, prompts, config)
            return out.answer, int(out.nfe[0])

        def fastdllm():
            with torch.no_grad():
                out, nfe = loop(theirs, x, steps=steps, gen_length=gen_length, block_length=block_length,
                                temperature=0.0, remasking="low_confidence", mask_id=model.mask_token_id)
            return out[:, prompt_length:], int(nfe)

        try:
            seconds, forward_s, nfe, same = rotate({"dllm": (model, ours), "fastdllm": (theirs, fastdllm)}, reps, sync)
            rows.append({"cache": cache, **comparison("dllm", batch * gen_length, seconds, forward_s, nfe, same["dllm"])})
        except Exception as err:  # one loop failing leaves the others' rows
            rows.append({"cache": cache, "error": f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:300]}"})
    del theirs
    return {"model": shape, "dtype": str(dtype).removeprefix("torch."), "fastdllm_commit": checkout_commit(folder),
            "batch": batch,
            "prompt_length": prompt_length, "gen_length": gen_length, "block_length": block_length,
            "tokens_per_step": tokens_per_step, "reps": reps, "rows": rows}
