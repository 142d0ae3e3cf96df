"""The decode core: the one loop (``decoding.Decoding``: windows -> steps -> strategy ->
commit -> stoppers), its configuration, the pipelined mode of block-causal models, decision
windows aligned to model blocks, the memory plan, logprob recording and the host-sync budget.

It calls the model only through ``dllm.runner`` and the K/V cache through ``dllm.cache``.
"""
