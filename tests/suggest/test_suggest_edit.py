"""nodes.yaml edited as a person would: moved nodes leave the lists that name them and are listed under
their new config; comments, order and every other line stay; the result loads as intended."""

from __future__ import annotations

import yaml

from migops.suggest.edit import edit_nodes, rewrite

TEXT = """\
version: v1   # the format
# which nodes get what
assignments:
  - nodes:
      - n1
      - n2
    config: x   # keep me
  - nodes: [n3]
    config: y
  - nodeSelector: {matchLabels: {pool: z}}
    config: z
prune: true
"""


def assignments(text: str) -> list[dict]:
    return yaml.safe_load(text)["assignments"]


def test_moved_nodes_leave_their_lists_and_join_their_config() -> None:
    out = edit_nodes(TEXT, {"n1": "y", "n3": "z", "n9": "w"})
    assert assignments(out) == [
        {"nodes": ["n2"], "config": "x"},
        {"nodes": ["n1"], "config": "y"},  # n3 left, n1 joined the list for y
        {"nodeSelector": {"matchLabels": {"pool": "z"}}, "config": "z"},
        {"nodes": ["n3"], "config": "z"},  # names beat the selector
        {"nodes": ["n9"], "config": "w"},
    ]


def test_an_existing_list_for_the_config_takes_the_node_and_comments_stay() -> None:
    out = edit_nodes(TEXT, {"n1": "y"})
    assert assignments(out)[:2] == [{"nodes": ["n2"], "config": "x"}, {"nodes": ["n3", "n1"], "config": "y"}]
    for line in ("version: v1   # the format", "# which nodes get what", "    config: x   # keep me", "prune: true"):
        assert line in out.splitlines()
    assert len(assignments(out)) == 3  # no new assignment


def test_an_assignment_left_without_nodes_goes() -> None:
    out = edit_nodes(TEXT, {"n3": "x"})
    assert assignments(out) == [
        {"nodes": ["n1", "n2", "n3"], "config": "x"},
        {"nodeSelector": {"matchLabels": {"pool": "z"}}, "config": "z"},
    ]
    assert "    config: x   # keep me" in out


def test_a_new_assignment_is_appended_at_the_end_of_the_list() -> None:
    out = edit_nodes(TEXT, {"n7": "w"})
    assert out == TEXT.replace("prune: true\n", "  - nodes: [n7]\n    config: w\nprune: true\n")


def test_empty_flow_or_absent_assignments() -> None:
    for text in ("version: v1\nassignments: []\nprune: false\n", "version: v1\nprune: false\n"):
        out = edit_nodes(text, {"n1": "y"})
        doc = yaml.safe_load(out)
        assert doc["assignments"] == [{"nodes": ["n1"], "config": "y"}] and doc["prune"] is False, out


def test_rewrite_is_the_same_change() -> None:
    changes = {"n1": "y", "n3": "z", "n9": "w"}
    assert sorted(map(str, assignments(rewrite(TEXT, changes)))) == sorted(
        map(str, assignments(edit_nodes(TEXT, changes)))
    )
    assert edit_nodes(TEXT, {}) == TEXT
