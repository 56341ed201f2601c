"""LLM serving: step-time models, EB / MB / EB+ schedulers, simulator, tiny engine."""
