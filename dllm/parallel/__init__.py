"""torch.distributed: branch parallelism and data-parallel throughput (imported only by the
commands that run under torchrun; single-process use never touches it)."""
