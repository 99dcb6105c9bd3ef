"""Plain-text stand-ins for the few rich pieces a walkthrough needs (Console, Table, Panel), so
that ``qkv demo`` runs on a plain install (NumPy only) and prints the same numbers as text.

:func:`console_kit` returns rich's classes when rich is installed and these otherwise; rich's
markup (``[bold]…[/bold]``, ``[green]✓[/green]``) is stripped here, never shown.
"""

from __future__ import annotations

import re
import shutil
import textwrap

# rich's style tags: [bold], [/bold], [bold green], [dim] … — letters and spaces only, so number
# lists such as "[0.731, 0.269]" are never taken for markup.
MARKUP = re.compile(r"\[/?[a-z][a-z ]*\]")


def strip_markup(text: str) -> str:
    return MARKUP.sub("", str(text))


class Table:
    """Columns, rows and a title, printed as aligned text."""

    def __init__(self, title: str | None = None, **_ignored):
        self.title = title
        self.columns: list[tuple[str, str]] = []  # (header, justify)
        self.rows: list[list[str]] = []

    def add_column(self, header: str = "", justify: str = "left", **_ignored) -> None:
        self.columns.append((strip_markup(header), justify))

    def add_row(self, *cells) -> None:
        self.rows.append([strip_markup(c) for c in cells])

    def __str__(self) -> str:
        grid = [[h for h, _ in self.columns], *self.rows]
        widths = [max(len(row[i]) for row in grid if i < len(row))
                  for i in range(len(self.columns))]
        lines = [strip_markup(self.title)] if self.title else []
        for n, row in enumerate(grid):
            cells = [c.rjust(w) if just == "right" else c.ljust(w)
                     for c, w, (_, just) in zip(row, widths, self.columns, strict=False)]
            lines.append("  ".join(cells).rstrip())
            if n == 0:
                lines.append("  ".join("-" * w for w in widths))
        return "\n".join(lines)


class Panel:
    """A titled block of text (rich's ``Panel.fit``)."""

    def __init__(self, text: str, title: str | None = None):
        self.text, self.title = strip_markup(text), title

    @classmethod
    def fit(cls, text: str, title: str | None = None, **_ignored) -> Panel:
        return cls(text, title)

    def __str__(self) -> str:
        return (f"== {self.title} ==\n" if self.title else "") + self.text


class Console:
    """``print`` (text wrapped to the terminal, markup stripped) and ``rule``."""

    def __init__(self, **_ignored):
        self.width = shutil.get_terminal_size((88, 24)).columns

    def print(self, *items) -> None:
        for item in items:
            if isinstance(item, str):
                print(textwrap.fill(strip_markup(item), width=self.width - 1))
            else:
                print(item)

    def rule(self, title: str = "") -> None:
        print(f"\n-- {strip_markup(title)} " + "-" * max(0, self.width - len(title) - 5))


def console_kit():
    """``(Console, Table, Panel)``: rich's when it is installed, else these plain ones."""
    try:
        from rich.console import Console as RichConsole
        from rich.panel import Panel as RichPanel
        from rich.table import Table as RichTable
    except ImportError:
        return Console, Table, Panel
    return RichConsole, RichTable, RichPanel
