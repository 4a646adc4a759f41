"""The archive of kernels that passed the gate, across runs."""
