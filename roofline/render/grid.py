"""A table that never cuts a number or an id: on a narrow terminal it drops whole columns, in an order each table
chooses, and says which. rich is imported when the table is drawn, at the width the console has then."""

from __future__ import annotations

from collections.abc import Sequence

GAP = 2  # columns between two cells: rich's padding (0, 1) on each side, no outer edge (pad_edge=False)


class Grid:
    """Columns `columns`, the first `left` left-aligned (names), the rest right-aligned (numbers); `drop` names the
    columns a narrow terminal may lose, first to go first; `wrap` the text columns that may wrap instead (reasons)."""

    def __init__(
        self,
        columns: Sequence[str],
        rows: Sequence[Sequence[str]],
        left: int = 1,
        drop: Sequence[str] = (),
        wrap: Sequence[str] = (),
    ):
        self.columns, self.rows, self.left = list(columns), [list(r) for r in rows], left
        self.drop, self.wrap = [c for c in drop if c in self.columns], set(wrap) & set(self.columns)

    def width(self, shown: list[int]) -> int:
        """Columns the table takes with the columns `shown`; a wrapping column counts at its longest word."""
        total = 0
        for k in shown:
            cells = [self.columns[k], *(r[k] for r in self.rows)]
            if self.columns[k] in self.wrap:
                total += max(max((len(w) for w in c.split()), default=0) for c in cells)
            else:
                total += max(len(c) for c in cells)
        return total + GAP * (len(shown) - 1)

    def shown(self, width: int) -> list[int]:
        """The columns that fit in `width`, dropping the droppable ones in order until the rest fits."""
        shown = list(range(len(self.columns)))
        for name in self.drop:
            if self.width(shown) <= width:
                break
            shown.remove(self.columns.index(name))
        return shown

    def __rich_console__(self, console, options):
        from rich.table import Table
        from rich.text import Text

        shown = self.shown(options.max_width)
        table = Table(box=None, pad_edge=False, header_style="bold")
        for k in shown:
            name = self.columns[k]
            wraps = name in self.wrap
            # Where even the kept columns do not fit, a cell wraps (or folds) onto a second line rather than lose its
            # end to an ellipsis; rich wraps only when the columns' natural widths do not fit.
            table.add_column(
                name, justify="left" if k < self.left else "right", overflow="fold", min_width=None if wraps else 1
            )
        for row in self.rows:
            table.add_row(*(row[k] for k in shown))
        yield table
        dropped = [self.columns[k] for k in range(len(self.columns)) if k not in shown]
        if dropped:
            yield Text(
                f"(not shown at {options.max_width} columns: {', '.join(dropped)}; a wider terminal, --json or --csv "
                "has them)",
                style="dim",
            )
