"""A run's records: each proposal's :class:`~kernel_forge.records.attempt.Attempt` and the run's
:class:`~kernel_forge.records.run_state.RunState`, the plain data the loop writes and the evidence,
the reports and a recorded gate read back."""
