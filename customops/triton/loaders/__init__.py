"""Loaders describe what Triton and each framework load, and how (one module per framework)."""
