"""The gate: preflight, the anti-cheat checks, the GPU worker's parent side, the pool of gates, the sanitizer, the profiler and its diagnosis."""
