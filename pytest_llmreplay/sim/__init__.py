"""The simulated serving engine: scheduler, KV cache, iteration timing and bundled profiles."""
