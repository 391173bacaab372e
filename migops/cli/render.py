"""Text drawings of MIG layouts and tables for people at a terminal."""

from __future__ import annotations

from collections.abc import Sequence

from migops.mig.catalogue import GpuModel
from migops.mig.placement import Placement


def _centered(text: str, width: int) -> str:
    if len(text) > width:
        text = text[: max(width - 1, 0)] + "~" if width > 1 else text[:width]
    return text.center(width)


def draw_layout(gpu: GpuModel, layout: Sequence[Placement], indent: str = "  ") -> list[str]:
    """The GPU's memory slices left to right, each GPU instance a box across the slices it holds.

    slice 0        1        2        3        4        5        6        7
         +--------+--------+-----------------+-----------------------------------+
         |1g.10gb |1g.10gb |     2g.20gb     |              3g.40gb              |
         +--------+--------+-----------------+-----------------------------------+
    """
    table = gpu.table
    assert table is not None, f"{gpu.name} cannot do MIG: no layout to draw"
    cell = 9 if table.memory_slices <= 8 else 6
    by_start = {p.start: p for p in layout}
    segments: list[tuple[int, str]] = []  # (size in slices, label)
    s = 0
    while s < table.memory_slices:
        p = by_start.get(s)
        if p is not None:
            segments.append((p.size, p.profile))
            s += p.size
        else:
            segments.append((1, "free"))
            s += 1
    border = "+" + "+".join("-" * (size * cell - 1) for size, _ in segments) + "+"
    body = "|" + "|".join(_centered(label, size * cell - 1) for size, label in segments) + "|"
    header = "".join(str(i).ljust(cell) for i in range(table.memory_slices)).rstrip()
    used_compute = sum(gi.compute_slices for p in layout for gi in gpu.profiles if gi.name == p.profile)
    used_memory = sum(p.size for p in layout)
    pad = " " * len("slice ")
    return [
        f"{indent}slice {' ' * 1}{header}",
        f"{indent}{pad}{border}",
        f"{indent}{pad}{body}",
        f"{indent}{pad}{border}",
        f"{indent}compute slices {used_compute}/{table.compute_slices}, memory slices {used_memory}/{table.memory_slices}",
    ]


def table(rows: Sequence[Sequence[str]], header: Sequence[str], width: int | None = None) -> list[str]:
    """A plain left-aligned table (like kubectl's), columns two spaces apart. With `width`, no line is
    longer: the last column's words wrap onto continuation lines under it, or, when the other columns
    leave it fewer than MIN_LAST, onto lines of their own below each row, indented."""
    cells = [[str(v) for v in r] for r in [header, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lead = sum(w + 2 for w in widths[:-1])
    stacked = width is not None and width - lead < MIN_LAST
    if width is not None and not stacked:
        widths[-1] = min(widths[-1], width - lead)
    lines = []
    for row in cells:
        *first, last = row
        if stacked:
            assert width is not None
            lines.append("  ".join(v.ljust(w) for v, w in zip(first, widths, strict=False)).rstrip())
            lines += ["    " + part for part in _wrap(last, max(width - 4, MIN_LAST))]
            continue
        parts = _wrap(last, widths[-1]) if width is not None else [last]
        lines.append("  ".join(v.ljust(w) for v, w in zip([*first, parts[0]], widths, strict=True)).rstrip())
        lines += [(" " * lead + part).rstrip() for part in parts[1:]]
    return lines


MIN_LAST = 20


def _wrap(text: str, width: int) -> list[str]:
    """Words onto lines of at most `width` characters (a longer word has a line of its own)."""
    lines: list[str] = []
    for word in text.split(" "):
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines or [""]
