"""What the structure tests (tests/packaging, tests/reconciler) share: cycles in a module import graph,
and what an assignment sets."""

from __future__ import annotations

import ast


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found: list[list[str]] = []
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> None:
        if node in path:
            found.append([*path[path.index(node) :], node])
            return
        if node in done:
            return
        for nxt in sorted(graph.get(node, ())):
            visit(nxt, [*path, node])
        done.add(node)

    for node in sorted(graph):
        visit(node, [])
    return found


def assignment_targets(node: ast.AST) -> list[ast.expr]:
    """The targets of an assignment statement (`=`, annotated, augmented); none for anything else."""
    if isinstance(node, ast.Assign):
        return list(node.targets)
    if isinstance(node, ast.AnnAssign | ast.AugAssign):
        return [node.target]
    return []


def assigned(target: ast.expr) -> list[ast.Attribute | ast.Subscript]:
    """What an assignment target sets inside an object (`a.b = `, `a.b.c |= `, `a.b[k] = `, `a.b, c.d = `)."""
    if isinstance(target, ast.Tuple | ast.List):
        return [a for elt in target.elts for a in assigned(elt)]
    if isinstance(target, ast.Starred):
        return assigned(target.value)
    return [target] if isinstance(target, ast.Attribute | ast.Subscript) else []


def chain_root(e: ast.expr) -> str | None:
    """The name an attribute or item chain starts from (`ports` of `ports.memory.awaiting[k]`)."""
    while isinstance(e, ast.Attribute | ast.Subscript):
        e = e.value
    return e.id if isinstance(e, ast.Name) else None
