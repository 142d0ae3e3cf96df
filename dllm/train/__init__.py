"""Training of the small masked-diffusion models that ship with dllm (never part of CI)."""
