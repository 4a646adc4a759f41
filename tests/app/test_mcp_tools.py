"""kernel_forge.app.mcp_tools: the MCP tools generated from their rows and the settings' declaration."""
from __future__ import annotations

import inspect
import typing

import pytest

pytest.importorskip("mcp")

from kernel_forge.app import mcp_server, mcp_tools  # noqa: E402
from kernel_forge.common.setting import fields_of  # noqa: E402
from kernel_forge.config.gate_settings import GateOptions  # noqa: E402
from kernel_forge.proposers.options import ProviderOptions  # noqa: E402


def schema_of(name: str) -> dict:
    (tool,) = [t for t in mcp_tools.make_tools(mcp_server.Service("runs")) if t.name == name]
    return tool.parameters


def test_a_named_setting_takes_its_declared_type_help_and_bounds():
    props = schema_of("eval_kernel")["properties"]
    reps = {f.name: f for f in fields_of(GateOptions)}["reps"]
    assert props["reps"]["description"].startswith(reps.spec.help + " (in [1, 1000000]); default 100")
    assert props["reps"]["anyOf"] == [{"type": "integer"}, {"type": "null"}] and props["reps"]["default"] is None
    assert props["timeout"]["anyOf"] == [{"type": "number"}, {"type": "null"}]
    base_url = schema_of("optimize")["properties"]["base_url"]["description"]
    help_ = {f.name: f for f in fields_of(ProviderOptions)}["base_url"].spec.help
    assert base_url == f"{help_}; proposer.base_url in settings"


def test_a_setting_added_to_a_row_becomes_a_typed_keyword_of_the_tool():
    spec = mcp_tools.ToolSpec("demo", "d", (mcp_tools.MANIFEST,), (mcp_tools.Named("loop", "patience"),
                                                                 mcp_tools.Named("proposer", "max_tokens", "out")))
    sig = mcp_tools.signature(spec)
    assert list(sig.parameters) == ["manifest", "patience", "out"]
    out = sig.parameters["out"]
    assert out.default is None and typing.get_args(out.annotation)[0] == typing.Optional[int]
    assert mcp_tools.named_arguments("optimize")[("loop", "time_limit_s")] == "time_limit"


def test_every_tool_argument_is_a_keyword_its_service_method_takes():
    for spec in mcp_tools.TOOLS:
        taken = set(inspect.signature(getattr(mcp_server.Service, spec.name)).parameters)
        assert {a.name for a in mcp_tools.arguments_of(spec)} <= taken, spec.name


def test_the_server_is_built_through_the_sdk_s_public_api_only():
    source = inspect.getsource(mcp_server) + inspect.getsource(mcp_tools)
    assert "._tool_manager" not in source and "server._" not in source


def test_a_setting_a_tool_names_differently_from_its_field_is_named_as_on_the_command_line():
    from kernel_forge.config.sections import command_line

    renamed = [(n, command_line().place(n.section, n.field)) for t in mcp_tools.TOOLS for n in t.named if n.name]
    assert renamed and all(n.name == flag.removeprefix("--").replace("-", "_") for n, flag in renamed), renamed
