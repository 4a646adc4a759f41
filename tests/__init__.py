"""The test suite of kernel_forge: tests/<layer>/test_*.py, shared helpers in tests/support/."""
