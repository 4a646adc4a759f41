"""The settings part of run.schema.json is generated from the declaration: the committed file is
what the generator writes, and the schema accepts and refuses what the validator does."""
from __future__ import annotations

import json

import jsonschema
import pytest

from kernel_forge.common.errors import InputError
from kernel_forge.config import schema as generator
from kernel_forge.config.build import InFile, check_values
from kernel_forge.config.sections import RUN_SECTIONS
from kernel_forge.common.setting import fields_of
from kernel_forge.evidence.run_dir import schema


def test_the_committed_run_schema_is_the_generated_one():
    text = generator.schema_path().read_text(encoding="utf-8")
    assert text == generator.render(generator.run_schema(json.loads(text))), \
        "run.schema.json is stale: python -m kernel_forge.config.schema"
    assert generator.main(["--check"]) == 0


def test_a_changed_declaration_makes_the_check_fail(monkeypatch):
    from kernel_forge.common.setting import SPEC, Spec

    loop = dict(RUN_SECTIONS)["loop"]
    field = loop.__dataclass_fields__["roof_stop"]
    monkeypatch.setattr(field, "metadata", {SPEC: Spec(help="x", min=0, max=3)})
    assert generator.main(["--check"]) == 1


def test_settings_added_since_the_first_runs_are_optional_so_old_runs_still_read():
    run = schema("run.schema.json")["properties"]
    for section, cls in RUN_SECTIONS:
        props, required = run[section]["properties"], set(run[section]["required"])
        assert list(props) == [f.name for f in fields_of(cls)]
        assert required == set(generator.FIRST_RECORDED[section]) <= set(props)
        for name in set(props) - required:
            assert props[name]["description"].endswith(generator.ADDED), name
    assert "roof_stop" not in run["loop"]["required"] and "max_iterations" in run["loop"]["required"]


SAMPLES = [-5, -1, -0.5, 0, 0.005, 0.5, 0.999, 1, 1.5, 2, 3, 1023, 1024, 10**6]


@pytest.mark.parametrize("section, cls", RUN_SECTIONS)
def test_the_schema_and_the_validator_accept_and_refuse_the_same_numbers(section, cls):
    properties = schema("run.schema.json")["properties"][section]["properties"]
    for f in fields_of(cls):
        prop = properties[f.name]
        if "number" not in str(prop.get("type")) and "integer" not in str(prop.get("type")):
            continue
        for v in SAMPLES:
            if "integer" in str(prop["type"]) and not isinstance(v, int):
                continue
            by_schema = jsonschema.Draft202012Validator(prop).is_valid(v)
            try:
                check_values(cls, {f.name: v}, InFile("t"))
                by_validator = True
            except InputError:
                by_validator = False
            assert by_schema == by_validator, f"{section}.{f.name} = {v}"


def test_a_run_json_of_default_settings_matches_the_schema():
    import dataclasses

    run = schema("run.schema.json")
    for section, cls in RUN_SECTIONS:
        jsonschema.validate(json.loads(json.dumps(dataclasses.asdict(cls()))), run["properties"][section])
