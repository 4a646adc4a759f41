"""Writing and checking a new task: ``kforge init`` from a kernel or a signature
(``from_kernel``) or from a description (``from_description``), ``kforge validate``
(``validate``), the cross-check of a generated task's two witnesses (``crosscheck``) and its
acceptance (``acceptance``).  Plain arguments in, ``kernel_forge.common.errors`` exceptions out:
no click, no exit codes."""
