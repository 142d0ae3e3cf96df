"""``make demo``: a real generation with the bundled trained model, and its stats line."""
from __future__ import annotations

import dllm

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
        print(f"  [NFE {s['nfe']} | TPF {s['tpf']:.2f} | {s['tokens'] / s['seconds']:.0f} tokens/s on CPU]")


if __name__ == "__main__":
    main()
