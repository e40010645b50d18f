"""`polyloop trace RUN`: the whole trace of a run, rebuilt from its log alone (parse, one call, render)."""

from __future__ import annotations

import asyncio
import sys
from typing import Annotated

import typer

from polyloop.for_cli import capture_from_env, otlp_traces_url, trace_json, trace_run
from polyloop.stores import open_store

from . import documents, options, terminal
from .errors import FAILURE, OK, BadInput, failures
from .scope import Scope

To = Annotated[
    str | None,
    typer.Option(
        "--to",
        metavar="URL",
        help="Send the spans to this OTLP/HTTP receiver (http://host:4318, or the full .../v1/traces URL); "
        "needs polyloop[otel].",
        show_default=False,
    ),
]


def command(
    run_id: options.RunId,
    directory: options.Directory = None,
    store_url: options.StoreUrl = None,
    to: To = None,
    json: options.Json = False,
) -> None:
    """Rebuild the trace of run ID from its log alone, with the times the log recorded.

    The spans are the ones `--otel` reports live, with the same ids: one
    `invoke_agent` span per process (the start, then each resume, linked to
    the one before), a `chat` span per model call attempt and an
    `execute_tool` span per tool execution. A result a resume reused is an
    event (polyloop.reused), never a second span; an execution a crash cut
    is a span with error.type polyloop.unknown. Works for a finished run, a
    crashed one, and one imported from another machine, traced live or not.
    Message and argument content is left out unless
    OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true; an idempotency
    key only ever appears as its SHA-256.

    Without --to or --json it prints the spans as a tree.

    Exit: 0 the trace was printed or sent (a log without records has no
    spans: nothing is sent), 1 the store failed or the receiver did not take
    the trace, 2 bad input (unknown run id, both --to and --json, a --to that
    is not an http:// or https:// URL, --to without polyloop[otel]).

    \b
    Example:
      polyloop trace demo
      polyloop trace demo --to http://localhost:4318
    """
    with failures(Scope(json=json)) as scope:
        scope.directory = where = options.where(directory, store_url)
        scope.run_id = run_id
        if to is not None and json:
            raise BadInput("give --to or --json, not both")
        if to is not None:
            otlp_traces_url(to)  # InvalidInputError (exit 2) before the store is read
        export = _exporter() if to is not None else None
        trace = asyncio.run(_read(where, run_id))
        if export is not None and not trace.spans:
            sys.stderr.write(f"nothing sent: the log of run {terminal.safe_text(run_id)} has no records, so no spans\n")
        elif export is not None:
            try:
                export(trace, to)
            except Exception as exc:  # the receiver refused, or is not there
                sys.stderr.write(f"polyloop: the trace of {terminal.safe_text(run_id)} was not sent to "
                                 f"{terminal.safe_text(to or '')}: {terminal.safe_text(str(exc))}\n")
                raise typer.Exit(FAILURE) from None
            sys.stderr.write(f"sent {len(trace.spans)} spans of trace {trace.trace_id} to {terminal.safe_text(to or '')}\n")
        elif json:
            documents.emit({k: v for k, v in trace_json(trace).items() if k != "schema"})
        else:
            _tree(trace)
    raise typer.Exit(OK)


def _exporter():  # type: ignore[no-untyped-def]
    try:
        from polyloop.otel import export
    except ImportError:
        raise BadInput("--to needs the otel extra: pip install 'polyloop[otel]'") from None
    return export


async def _read(where: str, run_id: str):  # type: ignore[no-untyped-def]
    async with open_store(where) as store:
        return await trace_run(store, run_id, content=capture_from_env())


def _tree(trace) -> None:  # type: ignore[no-untyped-def]
    doc = trace_json(trace)
    children: dict[str | None, list[dict]] = {}
    ids = {s["span_id"] for s in doc["spans"]}
    for s in doc["spans"]:
        children.setdefault(s["parent_span_id"] if s["parent_span_id"] in ids else None, []).append(s)
    if doc["trace_id"] is None:
        print(f"no trace of run {terminal.safe_text(doc['run_id'])}: its log has no records")
        return
    print(f"trace {doc['trace_id']} of run {terminal.safe_text(doc['run_id'])}")

    def show(span: dict, depth: int) -> None:
        ms = (span["end_unix_nano"] - span["start_unix_nano"]) / 1e6
        flag = f"  [{span['error_type']}]" if span["error_type"] else ""
        print(f"{'  ' * depth}{terminal.safe_text(span['name'])}  {span['start']}  {ms:.1f} ms{flag}")
        for e in span["events"]:
            rid = e["attributes"].get("polyloop.result.id", "")
            print(f"{'  ' * (depth + 1)}* {e['name']} {terminal.safe_text(str(rid))}".rstrip())
        for child in children.get(span["span_id"], []):
            show(child, depth + 1)

    for root in children.get(None, []):
        show(root, 0)
