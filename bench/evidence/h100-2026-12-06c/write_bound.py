import sys
from pathlib import Path
from kernel_forge.kinds import identify
from kernel_forge.kinds.bind import instantiate
from kernel_forge.model.task import load_task
if __name__ == "__main__":
    out = Path(sys.argv[1])
    for m in sys.argv[2:]:
        t = load_task(m)
        for b in instantiate(t, identify(t).match):
            (out / f"{Path(m).stem}.{b.label}").write_text(b.source)
            print("wrote", out / f"{Path(m).stem}.{b.label}")
