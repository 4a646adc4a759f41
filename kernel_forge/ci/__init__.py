"""The CI regression gate and the checks it stands on: ``kforge eval`` (``evaluate``: one kernel
through the gate beside the initial kernel and the baselines), ``kforge approve`` / ``kforge gate``
(``regression``) and ``kforge replay`` (``replay_check``).  Plain arguments in,
``kernel_forge.common.errors`` exceptions out: no click, no exit codes."""
