"""kernel_forge/model/references.py: loading, calling and checking the user's reference callables."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from kernel_forge.common.errors import ReferenceError_
from kernel_forge.model.inputs import generate
from kernel_forge.model.references import check_finite, compute_reference, guarded_call, load_callable, python_name
from kernel_forge.model.task import CallableRef, Case, load_task

ROOT = Path(__file__).resolve().parents[2]


def ref_file(tmp_path: Path, source: str, function: str = "reference") -> CallableRef:
    path = tmp_path / "ref.py"
    path.write_text(source)
    return CallableRef("python", path, function, f"ref.py:{function}")


def vector_add(ref: CallableRef, **changes):
    """vector_add with ``ref`` as its reference."""
    return dataclasses.replace(load_task(ROOT / "manifests" / "vector_add.json"), reference=ref, **changes)


def test_a_python_keyword_gets_a_trailing_underscore():
    assert [python_name(n) for n in ("in", "lambda", "out", "n")] == ["in_", "lambda_", "out", "n"]


def test_how_a_reference_ends_itself_is_said_in_a_reference_error():
    def leave():
        raise SystemExit(3)

    def later():
        raise NotImplementedError("the tiled case")

    with pytest.raises(ReferenceError_, match=r"^ref called sys\.exit\(3\); a reference must return, writing its "
                                              r"outputs in place$"):
        guarded_call("ref", leave)
    with pytest.raises(ReferenceError_, match="^ref is not implemented yet: the tiled case$"):
        guarded_call("ref", later)
    with pytest.raises(KeyboardInterrupt):                    # Ctrl-C still stops kforge
        guarded_call("ref", lambda: (_ for _ in ()).throw(KeyboardInterrupt()))
    assert guarded_call("ref", lambda x, y=0: x + y, 2, y=3) == 5


def test_a_failure_names_the_deepest_line_of_the_user_s_code(tmp_path):
    ref = ref_file(tmp_path, "def add(x, y):\n    return x + y[:3]\n\n\ndef reference(a, b, c, n):\n"
                             "    c[...] = add(a, b)\n")
    fn = load_callable(ref)
    a = np.zeros(4)
    with pytest.raises(ReferenceError_) as info:
        guarded_call("reference ref.py:reference", fn, a=a, b=a, c=a.copy(), n=4)
    assert info.value.message.startswith("reference ref.py:reference failed: ValueError: operands could not be broadcast")
    assert info.value.message.endswith(f"(at {ref.path}:2 in add: return x + y[:3])")


def test_a_callable_is_loaded_from_its_file_s_current_text(tmp_path):
    ref = ref_file(tmp_path, "def reference(x):\n    return 1\n")
    assert load_callable(ref)(1) == 1 and load_callable(ref) is load_callable(ref)
    ref.path.write_text("def reference(x):\n    return 2\n")
    assert load_callable(ref)(1) == 2
    assert not list(tmp_path.glob("__pycache__"))                         # nothing written beside it


def test_a_callable_that_cannot_be_loaded_says_why(tmp_path):
    with pytest.raises(ReferenceError_, match="has no function 'nope'"):
        load_callable(ref_file(tmp_path, "def reference():\n    pass\n", "nope"))
    with pytest.raises(ReferenceError_, match=r"^importing .*ref\.py failed: SyntaxError: .* \(at .*ref\.py:2\)$"):
        load_callable(ref_file(tmp_path, "x = 1\ndef reference(:\n"))
    gone = CallableRef("python", tmp_path / "gone.py", "reference", "gone.py:reference")
    with pytest.raises(ReferenceError_, match="gone.py: cannot read it: No such file or directory"):
        load_callable(gone)


def test_compute_reference_hands_pure_outputs_zeroed_and_returns_what_was_written_in_place(tmp_path):
    ref = ref_file(tmp_path, "def reference(a, b, c, n):\n    c += a\n    c[0] = n\n")
    task = vector_add(ref)
    inputs = generate(task, Case("five", "correctness", {"n": 5}, 0), seed=1)
    poisoned = inputs.buffers["c"].copy()
    out = compute_reference(task, inputs)
    a = inputs.buffers["a"]
    assert list(out) == ["c"] and out["c"].dtype == np.float32
    assert out["c"][0] == 5.0 and np.array_equal(out["c"][1:], a[1:])      # += on zeros, not on the poison
    assert inputs.buffers["c"].tobytes() == poisoned.tobytes()             # it wrote into a copy


def test_expected_values_must_be_finite_unless_the_manifest_allows_otherwise():
    task = vector_add(CallableRef("python", Path("ref.py"), "reference", "ref.py:reference"))
    bad = {"c": np.array([[1.0, np.inf], [np.nan, 2.0]], np.float32)}
    with pytest.raises(ReferenceError_) as info:
        check_finite(task, "odd", bad)
    assert info.value.message == ("reference ref.py:reference on case 'odd': output c holds 2 NaN/Inf value(s) of 4 "
                                  "(first at [0, 1]: inf); expected values must be finite, or a kernel that writes NaN "
                                  "would pass")
    assert '"nonfinite_outputs": true' in info.value.hint
    check_finite(dataclasses.replace(task, nonfinite_outputs=True), "odd", bad)
    check_finite(task, "odd", {"bins": np.array([1, 2], np.int32)})           # integers are always finite


def test_a_bool_buffer_is_drawn_as_0_or_1_seen_as_numpy_bools_and_a_bool_output_comes_back_as_bytes(tmp_path):
    import json

    d = json.loads((ROOT / "tests" / "data" / "kinds" / "where_select.json").read_text())
    d["signature"] = d["signature"].replace("float* __restrict__ out", "bool* __restrict__ out")
    d["args"]["cond"]["init"] = {"kind": "normal", "std": 3.0}           # any nonzero draw is true
    d["reference"] = {"python": "ref.py:reference"}
    (tmp_path / "t.json").write_text(json.dumps(d))
    (tmp_path / "ref.py").write_text("import numpy as np\n"
                                     "def reference(cond, a, b, out, n):\n"
                                     "    assert cond.dtype == np.bool_ and out.dtype == np.bool_\n"
                                     "    out[...] = cond & (a > b)\n")
    task = load_task(tmp_path / "t.json")
    inputs = generate(task, Case("five", "correctness", {"n": 64}, 0), seed=1)
    cond = inputs.buffers["cond"]
    assert cond.dtype == np.uint8 and set(np.unique(cond)) == {0, 1}
    out = compute_reference(task, inputs)["out"]
    want = (cond != 0) & (inputs.buffers["a"] > inputs.buffers["b"])
    assert out.dtype == np.uint8 and np.array_equal(out, want.astype(np.uint8))
