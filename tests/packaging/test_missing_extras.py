"""`import polyloop.otel` / `import polyloop.pydantic_ai` without their extra, or an `MCPServer` without the MCP SDK:
an ImportError naming the extra."""

from __future__ import annotations

import importlib
import re
import sys

import pytest


@pytest.mark.parametrize(("module", "package", "extra"), [
    ("polyloop.otel", "opentelemetry", "otel"),
    ("polyloop.pydantic_ai", "pydantic_ai", "pydantic-ai"),
])
def test_a_module_whose_extra_is_missing_names_the_pip_install(monkeypatch, module, package, extra) -> None:
    # As if the extra were not installed: the package and every module of it cannot be imported.
    for name in [n for n in sys.modules if n == package or n.startswith(f"{package}.")] + [package]:
        monkeypatch.setitem(sys.modules, name, None)
    for name in [n for n in sys.modules if n == module or n.startswith(f"{module}.")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(ImportError) as caught:
        importlib.import_module(module)
    assert type(caught.value) is ImportError  # not a bare ModuleNotFoundError of some inner module
    assert f"pip install 'polyloop[{extra}]'" in str(caught.value)
    assert caught.value.name is not None and caught.value.name.startswith(package)



def test_an_mcp_server_declared_without_the_sdk_names_the_pip_install(monkeypatch) -> None:
    # `polyloop.mcp` imports without the SDK (it imports it when a server first starts); declaring a server says what to install.
    from polyloop.mcp import MCPServer

    for name in [n for n in sys.modules if n == "mcp" or n.startswith("mcp.")] + ["mcp"]:
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ImportError, match=re.escape("pip install 'polyloop[mcp]'")):
        MCPServer("time", command="mcp-server-time")
