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


def table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> list[str]:
    """A plain left-aligned table (like kubectl's), columns two spaces apart."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = []
    for row in [header, *rows]:
        lines.append("  ".join(str(v).ljust(w) for v, w in zip(row, widths)).rstrip())
    return lines
