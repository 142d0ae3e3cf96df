"""Document loading and scoring for the local lm-eval tasks (no network: the JSON builder of
``datasets`` over the committed file beside this one)."""
from __future__ import annotations

from pathlib import Path

import datasets

from dllm.bench.metrics import list_match_score

DOCS = Path(__file__).resolve().parent / "reverse.jsonl"


def load_reverse(**_metadata):
    """The waiting-line reverse documents as a DatasetDict with one ``test`` split
    (lm-eval passes its metadata, the model_args included, as keywords; none are needed)."""
    return datasets.load_dataset("json", data_files={"test": str(DOCS)})


def score_list(doc: dict, results: list[str]) -> dict[str, float]:
    """exact_match: the answer text equals the label; list_match: ParallelBench's metric
    (the same names in the same order, parsed leniently)."""
    output = results[0]
    return {"exact_match": float(output.strip() == doc["answer"]), "list_match": list_match_score(output, doc)}
