"""The corpus's 3x3 blur (bench/wild/blur3x3) as a task in a test's folder: ``naive.cu`` (no tune
lines) and ``tuned.cu`` (BX/BY/RY), optionally made an operation of no kind kernel_forge.kinds
knows (a 3x3 maximum), for the tests of the search of a kernel's own space."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from tests.support.paths import ROOT

BLUR = ROOT / "bench" / "wild" / "blur3x3"


def own_attempts(hist: list[dict]) -> list[dict]:
    """The history's gated attempts of the initial kernel's own settings (its declared one and the
    tuner's), the bound patterns of the blur's kind left out."""
    from kernel_forge.search.bound import is_bound_label

    return [a for a in hist if a["proposer"] in ("initial", "tune") and a.get("evaluation")
            and not is_bound_label(a["label"])]


def blur_task(tmp_path: Path, initial: str = "naive.cu", templates: list[str] | None = None,
              of_no_kind: bool = False) -> Path:
    """The corpus blur's manifest in ``tmp_path`` with ``initial`` (and ``templates``).
    ``of_no_kind``: the blur made a 3x3 morphological gradient (the window's maximum minus its
    minimum), an operation of no kind kernel_forge.kinds knows, so no bound pattern fits and the
    kernel's own source is searched.  (A 3x3 maximum alone is a max pooling of stride 1 and padding 1.)"""
    for f in ("reference.py", "naive.cu", "tuned.cu"):
        shutil.copy(BLUR / f, tmp_path / f)
    if of_no_kind:
        ref = (tmp_path / "reference.py").read_text()
        win = "[p[i:i + h, j:j + w] for i in range(3) for j in range(3)]"
        ref = ref.replace("s = sum(p[i:i + h, j:j + w] for i in range(3) for j in range(3))",
                          f"s = np.maximum.reduce({win}) - np.minimum.reduce({win})")
        (tmp_path / "reference.py").write_text(ref.replace("(s * np.float32(1.0 / 9.0))", "s"))
        for f in ("naive.cu", "tuned.cu"):
            src = (tmp_path / f).read_text().replace("float s = 0.0f;", "float s = -INFINITY, lo = INFINITY;")
            src = re.sub(r"s \+= (x\[[^;]*\]);", r"s = fmaxf(s, \1); lo = fminf(lo, \1);", src)
            src = src.replace("y[r * w + c] = s * (1.0f / 9.0f);", "y[r * w + c] = s - lo;" if f == "naive.cu" else
                              "y[r * w + c] = s;")
            (tmp_path / f).write_text(src)
    data = json.loads((BLUR / "blur3x3.json").read_text())
    data.pop("$schema")
    data["initial"] = initial
    if initial == "tuned.cu":
        data.pop("launch")            # its header carries the launch
    if templates:
        data["templates"] = templates
    path = tmp_path / "blur3x3.json"
    path.write_text(json.dumps(data))
    return path
