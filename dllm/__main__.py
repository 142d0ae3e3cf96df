"""``python -m dllm`` is the ``dllm`` command (used under torchrun)."""
try:
    from dllm.cli import main
except KeyboardInterrupt:  # Ctrl-C while torch imports: no traceback, as in main()
    raise SystemExit(130) from None

raise SystemExit(main())
