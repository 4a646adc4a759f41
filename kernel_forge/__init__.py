"""kernel_forge: make one CUDA kernel faster, and prove it.

Importing this package loads neither CuPy nor the CUDA bindings; the GPU is reached only
through :mod:`kernel_forge.gpu`, imported lazily by the gate's worker and by ``kforge doctor``.
"""
__version__ = "0.1.0"
