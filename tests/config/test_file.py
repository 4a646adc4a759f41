"""The ``--config`` file: its sections through the one validator, named by file and JSON path."""
from __future__ import annotations

import json
from importlib import resources

import pytest

from kernel_forge.common.errors import InputError
from kernel_forge.config.build import InFile
from kernel_forge.config.file import load_config_file, sections_from


def write(tmp_path, data) -> str:
    p = tmp_path / "opt.json"
    p.write_text(json.dumps(data))
    return str(p)


def test_the_shipped_example_loads_with_every_section_checked():
    cfg = load_config_file(str(resources.files("kernel_forge").joinpath("data/optimize.example.json")))
    assert set(cfg) >= {"loop", "gate", "proposer", "manifest"} and cfg["loop"]["roof_stop"] == 0.9
    assert isinstance(cfg["gate"]["launch_timeout_s"], float)


@pytest.mark.parametrize("data, words", [
    ([], "a config is a JSON object"),
    ({"loops": {}}, "$.loops: unknown section"),
    ({"gate": []}, "$.gate must be an object"),
    ({"gate": {"wramup": 3}}, "$.gate.wramup: unknown setting"),
    ({"gate": {"max_noise": 2}}, "$.gate.max_noise: must be at most 1, got 2.0"),
    ({"manifest": 3}, "$.manifest: expected a string (a path), got 3"),
])
def test_a_bad_file_is_named_with_the_place_and_what_is_wrong(tmp_path, data, words):
    path = write(tmp_path, data)
    with pytest.raises(InputError) as err:
        load_config_file(path)
    assert str(err.value).startswith(f"{path}: ") and words in str(err.value)


def test_sections_absent_from_the_file_are_empty():
    assert sections_from({"loop": {"patience": 2}}, InFile("x")) == {"loop": {"patience": 2}, "proposer": {}, "gate": {}}
