"""``make demo``: a real generation with the bundled trained model, its stats line, and one
line from every other bundled model (each family it ships)."""
from __future__ import annotations

import dllm
from dllm.models.bundled import DEFAULT_MODEL, bundled_models

PROMPT = (
    "You are managing a waiting line at a customer service desk.\n"
    "The previous staff member put the waiting line in the wrong order.\n"
    "Please reverse the order of the following people in the waiting line to correct it:\n"
    '["Grace Wright", "Alan Wells", "Billy Ramos", "Emma Stone"]\n'
    "Please reverse the order of the list and provide only the final list.\n"
)


def main() -> None:
    model = dllm.load()  # the bundled model: dllm/assets/models/dllm-waitingline-llada
    print(f"model: {model.path.name}  prompt:\n{PROMPT}")
    for label, options in [
        ("one token per step (low_confidence)", dict(gen_length=32, steps=32)),
        ("4 tokens per step (low_confidence)", dict(gen_length=32, steps=8)),
        ("threshold 0.9 + dual cache, block 8", dict(gen_length=32, block_length=8, policy="threshold",
                                                     policy_args={"tau": 0.9}, cache="dual")),
    ]:
        out = model.generate(PROMPT, **options)
        s = out.stats[0]
        print(f"{label}: {out.texts[0]}")
        print(f"  [NFE {s['nfe']} | TPF {s['tpf']:.2f} | {s['tokens'] / s['seconds']:.0f} tokens/s on {model.model.device}]")
    print("\nevery bundled model, one token per step (the uniform-state one: its entropy-bound acceptance, up to "
          "32 steps; `dllm models` lists them):")
    for name in bundled_models():
        other = model if name == DEFAULT_MODEL else dllm.load(name)
        out = other.generate(PROMPT, gen_length=32, steps=32)
        layout = other.model.config.family + (" (block-causal)" if other.model.attention == "block_causal" else
                                              " (uniform state: eb_sampler)" if getattr(other.model, "uniform_state", False)
                                              else "")
        print(f"  {name} [{layout}, NFE {out.stats[0]['nfe']}]: {out.texts[0]}")


if __name__ == "__main__":
    main()
