"""``python -m dllm`` is the ``dllm`` command (used under torchrun)."""
from dllm.cli import main

raise SystemExit(main())
