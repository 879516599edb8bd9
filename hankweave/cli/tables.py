"""Tables that fit the terminal: every table the command line prints is a :class:`FitTable`.

A table declares its columns once (:class:`TableColumn`): the *key* columns (a codon's id, status and
cost) are always columns and never cut; every other column has a priority.  When the table is
drawn, it measures its cells against the width it is given: the other columns stay columns, in
priority order, while they fit, and the rest fold into one detail line under each row
(``label value · label value``), so nothing is cut and nothing wraps into one-word columns.
A console as wide as the content (``inspect --wide``, :func:`wide_console`) shows every column.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
    from rich.table import Table
    from rich.text import Text

__all__ = ["WIDE_WIDTH", "FitTable", "TableColumn", "money", "wide_console"]

WIDE_WIDTH = 4000
"""The console width of ``--wide``: wider than any row, so every column stays a column."""


@dataclass(frozen=True)
class TableColumn:
    """One column of a :class:`FitTable`."""

    header: str
    key: bool = False
    """Always a column, never cut (a row is unreadable without it)."""
    priority: int = 0
    """Among the other columns, lower stays a column longer when space runs out."""
    justify: Literal["left", "right"] = "left"
    wrap_at: int | None = None
    """Free text (a failure, a question): may wrap inside the column down to this width;
    ``None`` keeps every cell on one line."""
    label: str | None = None
    """Its name in the detail line (default: the header in lower case)."""

    @property
    def detail_label(self) -> str:
        return self.label if self.label is not None else self.header.lower()


class FitTable:
    """A rich renderable table that keeps its key columns and folds the others to fit.

    Empty cells (``""`` or ``"-"``) are left out of the detail line, and a column whose cells
    are all empty is not drawn.
    """

    def __init__(self, columns: Sequence[TableColumn], *, box: bool = True,
                 title: str | None = None) -> None:
        self.columns = list(columns)
        self.rows: list[list[Text]] = []
        self.box = box
        self.title = title

    def add_row(self, *cells: str | Text) -> None:
        from rich.text import Text

        if len(cells) != len(self.columns):
            raise ValueError(f"{len(cells)} cells for {len(self.columns)} columns")
        self.rows.append([cell if isinstance(cell, Text) else Text(cell) for cell in cells])

    # ----- layout -----

    def shown(self, console: Console, width: int) -> dict[int, int]:
        """The columns drawn as columns at ``width`` (declared order) and their widths.

        When some column folds anyway, free text that would wrap in a narrow column folds
        too: the detail line gives it the whole width, and its room goes to other columns."""
        chosen = self._select(console, width, squeeze=True)
        if len(chosen) < len(self._drawable()):
            chosen = self._select(console, width, squeeze=False)
        return self._widths(chosen, width - self._overhead(console, len(chosen)))

    def _drawable(self) -> list[int]:
        # A column with nothing in it is not drawn (it would be a header over blanks).
        return [i for i, col in enumerate(self.columns) if col.key or not self._empty(i)]

    def _select(self, console: Console, width: int, *, squeeze: bool) -> list[int]:
        chosen = [i for i, col in enumerate(self.columns) if col.key]
        others = sorted((i for i in self._drawable() if not self.columns[i].key),
                        key=lambda i: (self.columns[i].priority, i))
        for index in others:
            candidate = sorted([*chosen, index])
            least = sum(self._smallest(i) if squeeze or self.columns[i].key
                        else self._natural(i) for i in candidate)
            if least + self._overhead(console, len(candidate)) <= width:
                chosen = candidate
            # A column that does not fit folds; a narrower one after it may still fit.
        return chosen

    def _empty(self, index: int) -> bool:
        return all(_blank(row[index]) for row in self.rows)

    def _natural(self, index: int) -> int:
        """The width of the column's widest cell (or header), each on one line."""
        cells: list[str | Text] = [self.columns[index].header, *(row[index] for row in self.rows)]
        return max((_cell_width(cell) for cell in cells), default=1)

    def _smallest(self, index: int) -> int:
        wrap_at = self.columns[index].wrap_at
        natural = self._natural(index)
        return natural if wrap_at is None else min(natural, wrap_at)

    def _widths(self, indexes: list[int], room: int) -> dict[int, int]:
        """Fixed widths, so that rows drawn as separate tables line up: free-text columns
        share what is left after the others, up to their widest cell."""
        widths = {i: self._smallest(i) for i in indexes}
        spare = room - sum(widths.values())
        for index in indexes:
            grow = min(max(spare, 0), self._natural(index) - widths[index])
            widths[index] += grow
            spare -= grow
        # Narrower than the key columns alone: the widest ones wrap, so that the short ones
        # (a status, a cost) stay whole.
        while spare < 0 and max(widths.values()) > _NARROWEST:
            widest = max(widths, key=lambda i: widths[i])
            widths[widest] -= 1
            spare += 1
        return widths

    def _overhead(self, console: Console, count: int) -> int:
        """What borders and padding add to ``count`` columns' widths."""
        from rich.measure import Measurement

        probe = self._table({i: 1 for i in range(count)}, [TableColumn("")] * count, header=False)
        probe.add_row(*([""] * count))
        options = console.options.update_width(WIDE_WIDTH)
        return Measurement.get(console, options, probe).maximum - count

    def _table(self, widths: dict[int, int], columns: Sequence[TableColumn] | None = None, *,
               header: bool = True) -> Table:
        from rich import box
        from rich.table import Table

        probe = columns is not None  # columns of width 1, to measure borders and padding
        columns = columns if columns is not None else self.columns
        table = Table(show_edge=False, pad_edge=False, show_header=header,
                      box=box.HEAVY_HEAD if self.box else None, padding=(0, 1),
                      header_style="bold", title=self.title if header else None,
                      title_justify="left", title_style="bold")
        for index, width in widths.items():
            col = columns[index]
            whole = col.wrap_at is None and (probe or width >= self._natural(index))
            table.add_column(col.header, justify=col.justify, overflow="fold", width=width,
                             no_wrap=whole)
        return table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        widths = self.shown(console, options.max_width)
        folded = sorted((i for i in self._drawable() if i not in widths),
                        key=lambda i: (self.columns[i].priority, i))
        if not folded:
            table = self._table(widths)
            for row in self.rows:
                table.add_row(*(row[i] for i in widths))
            yield table
            return
        yield from self._folded(widths, folded)

    def _folded(self, widths: dict[int, int], folded: list[int]) -> Iterable[RenderableType]:
        """The shown columns as a table, each row followed by its detail line."""
        from rich.padding import Padding

        yield self._table(widths)
        for row in self.rows:
            line = self._table(widths, header=False)
            line.add_row(*(row[i] for i in widths))
            yield line
            detail = self._detail(row, folded)
            if detail.plain:
                yield Padding(detail, (0, 0, 0, _DETAIL_INDENT), expand=False)

    def _detail(self, row: list[Text], folded: list[int]) -> Text:
        from rich.text import Text

        parts: list[Text] = []
        for index in folded:
            cell = row[index]
            if _blank(cell):
                continue
            label = self.columns[index].detail_label
            parts.append(Text.assemble((f"{label} ", "dim"), cell) if label else cell)
        return Text(" · ", style="dim").join(parts)


_DETAIL_INDENT = 2
_NARROWEST = 8
"""A column squeezed below its widest cell (the terminal is narrower than the key columns)
wraps at no fewer than this many cells."""


def _blank(cell: Text) -> bool:
    return cell.plain.strip() in ("", "-")


def _cell_width(cell: str | Text) -> int:
    from rich.cells import cell_len

    text = cell.plain if not isinstance(cell, str) else cell
    return max((cell_len(line) for line in text.splitlines()), default=0)


def money(value: float | None) -> str:
    """Dollars to four decimals, whole (a cost cell is never cut)."""
    return f"${value or 0:.4f}"


def wide_console(console: Console) -> Console:
    """``console`` made wide enough that no table folds (``--wide``)."""
    console.width = WIDE_WIDTH
    return console
