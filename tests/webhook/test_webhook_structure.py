"""The webhook's shape, checked on its source: no function over 60 lines (webhook/ and its command,
migops/cli/webhook.py), and no class named like one elsewhere in the product (the node index is not
mig.placement's Placement)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 60
PRODUCT = ("mig", "api", "kube", "logs", "certs", "webhook", "gitops", "reconciler", "agent", "suggest")


def _trees(paths: list[Path]) -> dict[Path, ast.Module]:
    return {p: ast.parse(p.read_text(), str(p)) for p in paths}


def test_no_function_over_60_lines() -> None:
    paths = sorted((ROOT / "webhook").glob("*.py")) + [ROOT / "migops" / "cli" / "webhook.py"]
    long = [
        f"{path.relative_to(ROOT)}:{n.name} ({n.end_lineno - n.lineno + 1} lines)"
        for path, tree in _trees(paths).items()
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        and n.end_lineno is not None
        and n.end_lineno - n.lineno + 1 > MAX_LINES
    ]
    assert long == []


def test_no_webhook_class_shares_a_name_with_another_product_class() -> None:
    classes: dict[str, set[str]] = {}
    for folder in PRODUCT:
        for path, tree in _trees(sorted((ROOT / folder).rglob("*.py"))).items():
            for n in ast.walk(tree):
                if isinstance(n, ast.ClassDef):
                    classes.setdefault(n.name, set()).add(str(path.relative_to(ROOT)))
    shared = {name: sorted(where) for name, where in classes.items() if len(where) > 1}
    assert {n: w for n, w in shared.items() if any(p.startswith("webhook/") for p in w)} == {}
