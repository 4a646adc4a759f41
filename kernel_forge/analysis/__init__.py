"""Analysis: what limits a kernel and what to try next, read from the gate's evaluations and profiles: the diagnosis, the limits it names, the directions for the prompt."""
