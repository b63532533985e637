"""``onceonly trace``: what the topics say about one message, event or reply key.

The API (also for the operator page and ``python -m devstack send``):

* :func:`find` ``(settings, ident) -> Trace | None``: read the topics, assemble the trace;
* :func:`recent_skips` ``(settings, limit) -> list[Skip]``: the worker's latest skips;
* :func:`render_text` ``(trace) -> str``, :func:`render` (a rich renderable) and
  :func:`to_json` ``(trace) -> dict``; :func:`skip_to_json` for one skip;
* :func:`assemble` ``(ident, Sources) -> Trace | None``: the pure part, from records.
"""

from onceonly.operations.trace.assemble import Sources, assemble
from onceonly.operations.trace.model import Record, Skip, Trace
from onceonly.operations.trace.query import TraceError, find, recent_skips
from onceonly.operations.trace.render import render, render_text, skip_to_json, to_json

__all__ = [
    "Record",
    "Skip",
    "Sources",
    "Trace",
    "TraceError",
    "assemble",
    "find",
    "recent_skips",
    "render",
    "render_text",
    "skip_to_json",
    "to_json",
]
