"""The one door to the GPU.

Only modules in this package import ``cuda.bindings`` or ``cupy``, and only when called.
:mod:`.nvrtc` compiles (works without a GPU); :mod:`.driver` probes, loads and launches;
:mod:`.runner` runs one case of one kernel inside the gate's worker process;
:mod:`.sanitize_child` runs one checked launch under compute-sanitizer.
"""
