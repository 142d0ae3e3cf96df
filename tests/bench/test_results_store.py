"""Benchmark records are stored compressed and compactly, and read back as written."""
from __future__ import annotations

import gzip
import json

from dllm.bench.results_store import ResultStore, read_samples, samples_path, summary_text

RECORDS = [{"prompt": [{"role": "user", "content": "copy: a b"}], "output": "a b", "score": 1.0, "nfe": 3},
           {"prompt": "x" * 2000, "output": "", "score": 0.0, "nfe": 8}]


def test_samples_are_gzipped_and_read_back(tmp_path):
    store = ResultStore(tmp_path)
    store.write_samples("k1", "waiting_line/copy", RECORDS)
    path = samples_path(tmp_path, "k1", "waiting_line/copy")
    assert path.name == "waiting_line__copy.jsonl.gz"
    raw = path.read_bytes()
    assert raw[:2] == b"\x1f\x8b"  # the gzip magic: not plain text
    plain = "".join(json.dumps(r) + "\n" for r in RECORDS).encode()
    assert gzip.decompress(raw) == plain and len(raw) < len(plain) / 4
    assert read_samples(tmp_path, "k1", "waiting_line/copy") == RECORDS


def test_the_same_records_give_the_same_bytes(tmp_path):
    """No timestamp in the gzip header: a rerun does not make git store the file again."""
    for folder in ("a", "b"):
        ResultStore(tmp_path / folder).write_samples("k1", "puzzle/latin_square_n4", RECORDS)
    a, b = (samples_path(tmp_path / f, "k1", "puzzle/latin_square_n4").read_bytes() for f in ("a", "b"))
    assert a == b


def test_plain_jsonl_of_older_folders_still_reads(tmp_path):
    legacy = tmp_path / "samples" / "k1" / "waiting_line__sort.jsonl"
    legacy.parent.mkdir(parents=True)
    legacy.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    assert read_samples(tmp_path, "k1", "waiting_line/sort") == RECORDS


def test_summary_keeps_a_row_per_line_and_parses_to_the_document(tmp_path):
    rows = [{"run": f"r{i}", "task": "t", "config": {"steps": i, "policy_args": {}}} for i in range(3)]
    document = {"meta": {"model": "m"}, "rows": rows, "runs": [], "pb": {"r0": {"PB80": None}}}
    text = summary_text(document)
    assert json.loads(text) == document
    lines = text.splitlines()
    assert sum(line.lstrip().startswith('{"run"') for line in lines) == 3
    assert len(text) < len(json.dumps(document, indent=1))
