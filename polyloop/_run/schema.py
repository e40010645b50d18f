"""A tool's parameters as one pydantic model: the JSON Schema the model is shown and the
validation of the arguments it sends (so the two cannot disagree), and the `Args:` of a docstring.

pydantic is imported inside these functions, not at the top: `import polyloop` (and so
`polyloop inspect`, `verify`) stays free of its import cost; the first tool declared pays it.
"""

from __future__ import annotations

import inspect
import re
import typing
import warnings
from collections.abc import Callable
from typing import Any

from .context import ToolContext


class BadArguments(Exception):
    """The arguments do not fit the schema; the message is one line for the model."""


class Signature:
    """The pydantic model of a tool's parameters: its schema, and the validation of arguments."""

    def __init__(self, fn: Callable[..., Any], arg_docs: dict[str, str]) -> None:
        import pydantic  # here, not at the top: see the module's docstring
        sig = inspect.signature(fn)
        try:
            hints = typing.get_type_hints(fn, include_extras=True)
        except Exception:  # unresolvable annotations only cost the schema its types
            hints = {}
        self.ctx_param: str | None = None
        self.positional: list[str] = []
        self.var_keyword = False
        fields: dict[str, Any] = {}
        for pname, param in sig.parameters.items():
            hint = hints.get(pname, param.annotation)
            if pname == "ctx" or hint is ToolContext or hint == "ToolContext":
                self.ctx_param = pname
                continue
            if param.kind is param.VAR_KEYWORD:
                self.var_keyword = True
                continue
            if param.kind is param.VAR_POSITIONAL:
                continue
            if param.kind is param.POSITIONAL_ONLY:
                self.positional.append(pname)
            # Internal field names, the parameter's name as alias: a parameter may be called
            # `json`, `copy` or `model_id` without clashing with pydantic's own attributes.
            fields[f"p{len(fields)}"] = _field(pname, hint, param.default, arg_docs.get(pname))
        self.names = {f"p{i}": info[1].alias for i, info in enumerate(fields.values())}
        config = pydantic.ConfigDict(extra="allow" if self.var_keyword else "forbid")
        self.model: type[pydantic.BaseModel] = pydantic.create_model(  # type: ignore[call-overload]
            f"{getattr(fn, '__name__', 'tool')}_arguments", __config__=config, **fields
        )
        self.plain = None if self.var_keyword else _plain_fields(fields)

    def schema(self) -> dict[str, Any]:
        from pydantic.json_schema import PydanticJsonSchemaWarning

        with warnings.catch_warnings():
            # a default JSON cannot hold is left out of the schema, which is what we want
            warnings.simplefilter("ignore", PydanticJsonSchemaWarning)
            raw = self.model.model_json_schema()
        raw = _strip_titles(raw)
        out: dict[str, Any] = {
            "type": "object",
            "properties": raw.get("properties", {}),
            "required": raw.get("required", []),
        }
        if not self.var_keyword:
            out["additionalProperties"] = False
        if "$defs" in raw:
            out["$defs"] = raw["$defs"]
        return out

    def validate(self, args: Any) -> tuple[list[Any], dict[str, Any]]:
        plain = self.plain
        if plain is not None and type(args) is dict:
            kwargs = _plain_values(plain, args)
            if kwargs is not None:
                positional = [kwargs.pop(name) for name in self.positional] if self.positional else []
                return positional, kwargs
        import pydantic

        if not isinstance(args, dict):
            raise BadArguments(f"the arguments must be a JSON object, not {_kind(args)}")
        try:
            model = self.model.model_validate(args)
        except pydantic.ValidationError as exc:
            raise BadArguments(_errors_line(exc)) from None
        kwargs = {alias: getattr(model, name) for name, alias in self.names.items()}
        if model.model_extra:
            kwargs.update(model.model_extra)
        positional = [kwargs.pop(name) for name in self.positional]
        return positional, kwargs


# Parameters of exactly these types, given values of exactly these types, come out of pydantic
# unchanged: such calls are checked by the fast path below, without building a model instance
# (docs/performance.md: pydantic's validation was ~10% of an in-memory step).
_PLAIN_TYPES = (str, int, float, bool)
_PLAIN_DEFAULTS = (str, int, float, bool, type(None))
_MISSING = object()


def _plain_fields(fields: dict[str, tuple[Any, Any]]) -> tuple[tuple[str, type, Any], ...] | None:
    """(alias, type, default or _MISSING) per parameter when every one is a plain scalar; else None."""
    import pydantic_core

    plain = []
    for hint, info in fields.values():
        default = _MISSING if info.default is pydantic_core.PydanticUndefined else info.default
        if hint not in _PLAIN_TYPES or info.metadata or info.default_factory is not None:
            return None
        if default is not _MISSING and type(default) not in _PLAIN_DEFAULTS:
            return None
        plain.append((info.alias, hint, default))
    return tuple(plain)


def _plain_values(plain: tuple[tuple[str, type, Any], ...], args: dict[str, Any]) -> dict[str, Any] | None:
    """The validated keyword arguments when every value has its parameter's exact type and no
    field is unknown or missing; None: let pydantic decide (and word the error)."""
    kwargs = {}
    found = 0
    for alias, kind, default in plain:
        value = args.get(alias, _MISSING)
        if value is _MISSING:
            if default is _MISSING:
                return None
            kwargs[alias] = default
        elif type(value) is kind:
            kwargs[alias] = value
            found += 1
        else:
            return None
    return kwargs if found == len(args) else None


def _field(name: str, hint: Any, default: Any, doc: str | None) -> tuple[Any, Any]:
    import pydantic

    if hint is inspect.Parameter.empty or isinstance(hint, str) or not _schema_ok(hint):
        hint = Any
    extra: dict[str, Any] = {"alias": name}
    if doc and not _has_description(hint):
        extra["description"] = doc
    if default is not inspect.Parameter.empty:
        extra["default"] = default
    return hint, pydantic.Field(**extra)


def _schema_ok(hint: Any) -> bool:
    import pydantic

    try:
        pydantic.TypeAdapter(hint).json_schema()
    except Exception:  # a type pydantic cannot describe is offered to the model as any value
        return False
    return True


def _has_description(hint: Any) -> bool:
    from pydantic.fields import FieldInfo

    if typing.get_origin(hint) is not typing.Annotated:
        return False
    return any(isinstance(m, FieldInfo) and m.description for m in hint.__metadata__)


def _strip_titles(node: Any) -> Any:
    """The schema without pydantic's generated `title`s (noise for a model), keeping properties named title."""
    if isinstance(node, list):
        return [_strip_titles(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in ("properties", "$defs") and isinstance(value, dict):
            out[key] = {k: _strip_titles(v) for k, v in value.items()}
        else:
            out[key] = _strip_titles(value)
    return out


def _errors_line(exc: Any) -> str:
    parts = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"]) or "(arguments)"
        msg = err["msg"]
        if err["type"] == "missing":
            msg = "required field missing"
        elif err["type"] == "extra_forbidden":
            msg = "unexpected field"
        else:
            msg = f"{msg} (got {_shown(err.get('input'))})"
        parts.append(f"{loc}: {msg}")
    return "; ".join(parts)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _kind(value: Any) -> str:
    return {list: "an array", str: "a string", type(None): "null"}.get(type(value), type(value).__name__)


_SECTION = re.compile(r"^(Args|Arguments|Parameters)\s*:\s*$")
_ENTRY = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def split_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """(the docstring without its Google-style Args section, {parameter: description})."""
    lines = doc.splitlines()
    start = next((i for i, line in enumerate(lines) if _SECTION.match(line.strip())), None)
    if start is None:
        return doc, {}
    head_indent = _indent(lines[start])
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > head_indent):
        end += 1
    found: dict[str, list[str]] = {}
    entry_indent, current = None, None
    for line in lines[start + 1 : end]:
        if not line.strip():
            continue
        m = _ENTRY.match(line.strip())
        if m and (entry_indent is None or _indent(line) <= entry_indent):
            entry_indent, current = _indent(line), m.group(1).lstrip("*")
            found[current] = [m.group(2).strip()]
        elif current is not None:
            found[current].append(line.strip())
    rest = lines[:start] + lines[end:]
    summary = "\n".join(rest).strip()
    return summary, {k: " ".join(p for p in v if p) for k, v in found.items()}


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())
