"""Two executions side by side, codon by codon: ``hankweave compare`` (docs/fork.md) for the
compare page.

Both executions are named by their ids on this dashboard, so a comparison only ever reads
executions the dashboard lists, never a path from the request.  The kernel's
:func:`hankweave.api.compare_executions` does the work, reading both as ``inspect`` does
(nothing written, either may be running); this adds what the page names and links them by.
"""

from __future__ import annotations

from typing import Any

from hankweave_dashboard.catalog import BadRequest, Catalog


class CannotCompare(Exception):
    """The kernel cannot compare the two (an unreadable state, a checkpoint store no
    installed backend reads): HTTP 400 with its message."""


def idents(query: dict[str, str]) -> tuple[str, str]:
    """The ids ``a`` and ``b`` of a compare request's query.

    Raises:
        BadRequest: one is missing.
    """
    a, b = query.get("a", ""), query.get("b", "")
    if not a or not b:
        raise BadRequest("name the two executions to compare: /compare?a=ID&b=ID, with the"
                         " ids of the dashboard's list")
    return a, b


def comparison(catalog: Catalog, a: str, b: str) -> dict[str, Any]:
    """``hankweave compare A B --json`` for the executions ``a`` and ``b`` of ``catalog``,
    each summary (``a``, ``b``) with its ``id``, ``name``, ``title`` and ``badge`` besides.

    Raises:
        BadRequest: a malformed id.
        NotFound: an id the dashboard does not serve.
        CannotCompare: the kernel's :class:`~hankweave.api.CompareError`.
    """
    from hankweave.api import CompareError, compare_executions, get_registry

    paths = {key: (ident, catalog.path_of(ident)) for key, ident in (("a", a), ("b", b))}
    try:
        result = compare_executions(paths["a"][1], paths["b"][1], registry=get_registry())
    except CompareError as exc:
        raise CannotCompare(str(exc)) from None
    data = result.model_dump(mode="json")
    for key, (ident, path) in paths.items():
        row = catalog.row(ident, path)
        data[key].update({"id": ident, "name": row["name"], "title": row["title"],
                          "badge": row["badge"]})
    return data
