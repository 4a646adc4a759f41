"""The gate: preflight, the anti-cheat checks, the GPU worker's parent side, the pool of gates, the sanitizer and the profiler."""
