"""The kernel library: the kernels kforge ships (expert patterns, the bundled tasks' tuning
templates and the kinds' bound templates) as package data in ``<kind>/<stem>.cu``, their registry
(:mod:`kernel_forge.kernels.library`) and which of them fit a task (:mod:`kernel_forge.kinds.fit`)."""
