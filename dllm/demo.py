"""``make demo``: a real generation with the bundled trained model, and its stats line."""
from __future__ import annotations

import tempfile

import dllm
from dllm.api import default_model_path

PROMPT = (
    "You are managing a waiting line at a customer service desk.\n"
    "The previous staff member put the waiting line in the wrong order.\n"
    "Please reverse the order of the following people in the waiting line to correct it:\n"
    '["Grace Wright", "Alan Wells", "Billy Ramos", "Emma Stone"]\n'
    "Please reverse the order of the list and provide only the final list.\n"
)


def main() -> None:
    path = default_model_path()
    if not path.exists():
        from dllm.models.tiny import write_tiny_checkpoint

        path = write_tiny_checkpoint(tempfile.mkdtemp(), "llada")
        print(f"(no bundled model yet: generating with a random tiny checkpoint at {path})")
    model = dllm.load(path)
    print(f"model: {model.path.name}  prompt:\n{PROMPT}")
    for label, options in [
        ("one token per step (low_confidence)", dict(gen_length=32, steps=32)),
        ("4 tokens per step (low_confidence)", dict(gen_length=32, steps=8)),
    ]:
        out = model.generate(PROMPT, **options)
        s = out.stats[0]
        print(f"{label}: {out.texts[0]}")
        print(f"  [NFE {s['nfe']} | TPF {s['tpf']:.2f} | {s['tokens'] / s['seconds']:.0f} tokens/s on CPU]")


if __name__ == "__main__":
    main()
