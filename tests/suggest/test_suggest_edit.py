"""nodes.yaml edited as a person would: moved nodes leave the lists that name them and are listed under
their new config; comments, order and every other line stay; the result loads as intended."""

from __future__ import annotations

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from migops.mig.yamlsafe import load_yaml
from migops.suggest.edit import edit_nodes, reads_as_text, rewrite

TEXT = """\
version: v1   # the format
# which nodes get what
assignments:
  - nodes:
      - n1
      - n2
    config: x   # keep me
  - nodes: [n3]
    config: v
  - nodeSelector: {matchLabels: {pool: z}}
    config: z
prune: true
"""


def assignments(text: str) -> list[dict]:
    return yaml.safe_load(text)["assignments"]


def test_moved_nodes_leave_their_lists_and_join_their_config() -> None:
    out = edit_nodes(TEXT, {"n1": "v", "n3": "z", "n9": "w"})
    assert assignments(out) == [
        {"nodes": ["n2"], "config": "x"},
        {"nodes": ["n1"], "config": "v"},  # n3 left, n1 joined the list for y
        {"nodeSelector": {"matchLabels": {"pool": "z"}}, "config": "z"},
        {"nodes": ["n3"], "config": "z"},  # names beat the selector
        {"nodes": ["n9"], "config": "w"},
    ]


def test_an_existing_list_for_the_config_takes_the_node_and_comments_stay() -> None:
    out = edit_nodes(TEXT, {"n1": "v"})
    assert assignments(out)[:2] == [{"nodes": ["n2"], "config": "x"}, {"nodes": ["n3", "n1"], "config": "v"}]
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
        out = edit_nodes(text, {"n1": "v"})
        doc = yaml.safe_load(out)
        assert doc["assignments"] == [{"nodes": ["n1"], "config": "v"}] and doc["prune"] is False, out


def test_rewrite_is_the_same_change() -> None:
    changes = {"n1": "v", "n3": "z", "n9": "w"}
    assert sorted(map(str, assignments(rewrite(TEXT, changes)))) == sorted(
        map(str, assignments(edit_nodes(TEXT, changes)))
    )
    assert edit_nodes(TEXT, {}) == TEXT


# Names DNS-1123 allows that YAML 1.1 (the node's reader, go-yaml v2) reads as something else, or PyYAML
# does: booleans, numbers in every base, floats, infinities, null, timestamps.
TRICKY = (
    "y",
    "n",
    "Y",
    "N",
    "on",
    "off",
    "yes",
    "no",
    "true",
    "null",
    "1e3",
    "1e10",
    "0x10",
    "0b1",
    "07",
    "08",
    "123",
    "1.50",
    "1_000",
    "2024-01-01",
    ".inf",
    ".nan",
    "~",
)
DNS_LABEL = r"[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?"
DNS_SUBDOMAIN = st.from_regex(rf"\A{DNS_LABEL}(\.{DNS_LABEL}){{0,3}}\Z")
PLAIN_ISH = st.one_of(DNS_SUBDOMAIN, st.sampled_from(TRICKY), st.from_regex(r"\A[0-9][0-9.eE+x_-]{0,6}\Z"))


def read(text: str) -> dict:
    """nodes.yaml as the loader reads it (go-yaml v2's YAML 1.1 rules, migops.mig.yamlsafe)."""
    doc = load_yaml(text)
    assert isinstance(doc, dict)
    return doc


def named(items: list[dict]) -> set[tuple[str, str]]:
    return {(n, i["config"]) for i in items for n in i.get("nodes", [])}


@given(name=PLAIN_ISH, config=PLAIN_ISH)
@settings(max_examples=150, deadline=None)
def test_every_name_reads_back_as_itself_and_comments_stay(name: str, config: str) -> None:
    for text in (TEXT, "version: v1  # mine\nassignments: []\n"):
        out = edit_nodes(text, {name: config})
        items = read(out)["assignments"]
        assert (name, config) in named(items), out
        assert all(isinstance(n, str) for i in items for n in i.get("nodes", [])), out
        assert "# mine" in out or "# the format" in out
        assert named(read(rewrite(text, {name: config}))["assignments"]) == named(items)


def test_the_names_yaml_reads_as_something_else_are_quoted() -> None:
    for name in TRICKY:
        assert not reads_as_text(name), name
        out = edit_nodes(TEXT, {name: "y"})
        assert read(out)["assignments"][-1] == {"nodes": [name], "config": "y"}
        assert f'- nodes: ["{name}"]\n    config: "y"\n' in out
    for name in ("gpu-node-7", "a100.rack-2", "nan", "0x", "1-2", "e3"):
        assert reads_as_text(name) and f"nodes: [{name}]" in edit_nodes(TEXT, {name: "w"})


def test_the_rewrite_keeps_what_the_nodes_reader_reads() -> None:
    """The fallback reads the file as the node does: `prune: y` stays a boolean, `on` a boolean key's value."""
    out = rewrite("version: v1\nprune: y\nassignments: []\n", {"on": "123"})
    assert read(out) == {"version": "v1", "prune": True, "assignments": [{"nodes": ["on"], "config": "123"}]}
