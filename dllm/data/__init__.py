"""Procedural ParallelBench-style data, prompt building and tokenizer training."""
