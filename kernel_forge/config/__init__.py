"""kforge's settings, declared once: the sections (``LoopConfig``, ``GateOptions`` with its
``TimingOptions``, ``ProposerConfig``, ``DescribeConfig``), each field's type, default, bounds,
help and command-line name; the one validator every entry point builds its settings with; the
``--config`` file; the settings part of ``run.schema.json``.  Imports only ``common`` and the
provider options (:mod:`kernel_forge.proposers.options`), which ``ProposerConfig`` extends."""
