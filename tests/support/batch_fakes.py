"""Gate factories for the batch tests (imported by name in Ray workers and in-process)."""
from __future__ import annotations

import os
from pathlib import Path

from tests.support.fakes import ScriptedGate


def scripted(task, options):
    return ScriptedGate(task)


class DiesOnce(ScriptedGate):
    """Kills its process at the 3rd evaluation of the task named in KFORGE_TEST_DIE_TASK, once
    (a marker file in KFORGE_TEST_DIE_MARKER says it already died), as a crashed node would."""

    def evaluate(self, candidate, **kw):
        marker = Path(os.environ["KFORGE_TEST_DIE_MARKER"])
        if (self.task.name == os.environ.get("KFORGE_TEST_DIE_TASK") and self.counts["evaluate"] == 2
                and not marker.exists()):
            marker.write_text("died")
            os._exit(17)
        return super().evaluate(candidate, **kw)


def dies_once(task, options):
    return DiesOnce(task)
