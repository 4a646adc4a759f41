"""Proposers: where candidate kernels come from. All implement :class:`base.Proposer`."""
