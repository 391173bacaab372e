"""A faster reader must read every input exactly as before: value, locations, surprises and notes.

tests/mig/data/reader-golden.json holds digests of everything the reader hands on, recorded before the
reader was optimised:

* the worst-case shapes of bench/_shapes.py (the largest files the input bounds admit), read bare and,
  where they fit in 1 MiB, inside a ConfigMap manifest (locations shifted into the whole file);
* every input of the conformance corpus (tests/mig/conformance/corpus.json: NVIDIA's configs and
  mutations of every YAML corner), read as a first document, as a stream, and as `migops validate` reads
  a file;
* hand-written inputs for what the corpus has little of: anchors, merges, aliases in keys, the order in
  which errors are found (a syntax error after a duplicate key), the node and depth bounds.

For a document: the JSON value (key order and int/float/bool kept), every location, every surprise
(how a scalar was written), the block scalars' positions, the start and the next document's start; for
an error: every problem with its line and column; for a parsed config: the configs, the notes and the
locations. Record again only for an intended change of what the reader reads, and say so in the commit:

    .venv/bin/python tests/mig/test_reader_golden.py --record
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import _shapes  # noqa: E402  (bench/_shapes.py: the generators)

from migops.mig.problems import MigError  # noqa: E402
from migops.mig.sources import read_file  # noqa: E402
from migops.mig.spec import MigPartedConfig, parse_config  # noqa: E402
from migops.mig.yamlsafe import Document, InputLimits, read_first, read_stream  # noqa: E402

GOLDEN = Path(__file__).resolve().parent / "data" / "reader-golden.json"
CONFORMANCE = Path(__file__).resolve().parent / "conformance"
_spec = importlib.util.spec_from_file_location("conformance_generate_golden", CONFORMANCE / "generate.py")
generate = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(generate)  # type: ignore[union-attr]
CORPUS = json.loads((CONFORMANCE / "corpus.json").read_text(encoding="utf-8"))

# Hand-written inputs: name -> text. The corpus covers scalars and keys; these cover structure and bounds.
EXTRA: dict[str, str] = {
    "merge-order": "b: &b {x: 1, w: 2}\nc:\n  x: 0\n  <<: *b\nd:\n  <<: *b\n  x: 0\ne:\n  <<: [{x: 1}, {x: 2, z: 3}]\n",
    "merge-nested-alias": "a: &a {p: 1}\nb: &b {<<: *a, q: 2}\nc: {<<: [*b, *a], r: 3}\nd: [*b, *a, *b]\n",
    "merge-inline-seq": "a:\n  <<:\n    - {x: 1}\n    - &m {y: 2}\n  <<: *m\n",
    "merge-bad": "a: &a [1]\nb: {<<: *a}\n",
    "merge-bad-item": "a: &a [1]\nb: {<<: [*a]}\n",
    "merge-scalar": "b: {<<: 1}\n",
    "merge-tagged": "a: &a {x: 1}\nb: {!!merge <<: *a}\nc: {\"<<\": 1}\n",
    "merge-collision": "a: &a {1: x}\nb: {<<: *a, \"1\": y}\n",
    "merge-duplicate-after": "a: &a {x: 1}\nb: {<<: *a, x: 2, x: 3}\n",
    "alias-key": "k: &k key\nm: {*k : 1, other: 2}\n",
    "alias-key-map": "k: &k {a: 1}\nm: {*k : 1}\n",
    "alias-recursive": "a: &a [1, *a]\n",
    "alias-recursive-merge": "a: &a {<<: *a}\n",
    "alias-unknown": "a: *nope\n",
    "anchor-redefined": "a: &x 1\nb: *x\nc: &x 2\nd: *x\n",
    "alias-scalars": "a: &n 0x10\nb: &y y\nc: [*n, *y, *n]\nd: {*y : *n}\n",
    "alias-in-devices": "version: v1\nmig-configs:\n  c:\n    - devices: &d [0, 1, 0x2]\n      mig-enabled: &t yes\n"
    "      mig-devices: {\"1g.10gb\": 1}\n  d:\n    - devices: *d\n      mig-enabled: *t\n"
    "      mig-devices: {\"1g.10gb\": 7.0}\n",
    "duplicate-then-syntax": "a: 1\na: 2\nb: [\n",
    "duplicate-then-deep": "a: 1\na: 2\nb: " + "[" * 40 + "]" * 40 + "\n",
    "deep-then-duplicate": "b: " + "[" * 40 + "]" * 40 + "\na: 1\na: 2\n",
    "deep-by-alias": "a: &a " + "[" * 20 + "1" + "]" * 20 + "\nb: " + "[" * 15 + "*a" + "]" * 15 + "\n",
    "deep-exact": "a: " + "[" * 30 + "1" + "]" * 30 + "\n",
    "nan-then-syntax": "a: .nan\nb: {\n",
    "nan-replaced": "a: .nan\n<<: {a: 1}\n",
    "nan-in-merge": "<<: {a: .inf}\nb: 1\n",
    "int-overflow-key": "9223372036854775808: 1\n",
    "null-key": "~: 1\n",
    "map-key": "? [1]\n: 2\n",
    "billion-laughs": "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
    "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
    "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: [*e, *e]\n",
    "excessive-aliasing": "a: &a [1]\nb: [" + ", ".join(["*a"] * 3000) + "]\n",
    "tags": "a: !foo v1\nb: !!str 1\nc: ! 7\nd: !!binary aGk=\ne: !!omap [1]\nf: !!int \"7\"\ng: !!float 1\n"
    "h: !!timestamp 2024-01-01\ni: !!null ''\nj: !!bool yes\nk: 2024-01-01 10:00:00\n",
    "tag-mismatch": "a: !!int 1.5\n",
    "binary-bad": "a: !!binary '%%%'\n",
    "block-scalars": "a: |\n  one\n  two\nb: >\n  folded\n  text\nc: |-\n  x\nd: 'q'\ne: \"dq\"\n",
    "yaml-1.2": "%YAML 1.2\n---\na: 1\n",
    "yaml-1.1": "%YAML 1.1\n---\na: 1\n",
    "stream": "a: 1\n---\nb: [1, 2]\n---\n---\nc: {d: y}\n...\n",
    "stream-error-late": "a: 1\n---\nb: 1\nb: 2\n",
    "empty": "",
    "comment-only": "# nothing\n",
    "flow-mix": "{version: v1, mig-configs: {a: [{devices: [0, 1], mig-enabled: true, mig-devices: {1g.10gb: 2}}]}}",
    "configmap-list": "apiVersion: v1\nkind: List\nitems:\n  - apiVersion: v1\n    kind: ConfigMap\n    metadata:\n"
    "      name: default-mig-parted-config\n    data:\n      config.yaml: |\n        version: v1\n"
    "        mig-configs:\n          all-1g.10gb:\n            - devices: all\n"
    "              mig-enabled: yes\n              mig-devices: {\"1g.10gb\": 7}\n"
    "  - apiVersion: v1\n    kind: Secret\n    metadata: {name: s}\n",
    "configmap-quoted": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: default-mig-parted-config}\n"
    "data:\n  config.yaml: \"version: v1\\nmig-configs:\\n  a:\\n    - devices: all\\n"
    "      mig-enabled: on\\n      mig-devices: {1g.10gb: 1}\\n\"\n",
    "configmap-broken": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: default-mig-parted-config}\n"
    "data:\n  config.yaml: |\n    version: v1\n    mig-configs:\n      a: [\n",
}
# Bounds small enough to hit with small inputs: name -> (text, limits).
BOUNDED: dict[str, tuple[str, InputLimits]] = {
    "budget-plain": ("a: [" + ", ".join(["1"] * 60) + "]\n", InputLimits(max_nodes=50)),
    "budget-alias": ("a: &a [1, 2, 3]\nb: [*a, *a, *a, *a, *a]\n", InputLimits(max_nodes=18)),
    "budget-key": ("a: &a k\nb: {*a : 1, x: 2}\n", InputLimits(max_nodes=6)),
    "depth-3": ("[[[1]]]", InputLimits(max_depth=3)),
    "depth-3-ok": ("[[1]]", InputLimits(max_depth=3)),
    "depth-alias": ("a: &a [[1]]\nb: [*a]\n", InputLimits(max_depth=3)),
    "size": ("a: 1\n" * 10, InputLimits(max_bytes=20)),
}


def _canon(obj: object) -> str:
    return json.dumps(obj, sort_keys=False, separators=(",", ":"), ensure_ascii=True)


def _digest(obj: object) -> str:
    return hashlib.sha256(_canon(obj).encode()).hexdigest()[:16]


def _problems(problems) -> list:
    return [p.as_dict() for p in problems]


def _document(doc: Document) -> dict:
    return {
        "value": _canon(doc.value),
        "locations": sorted((p, tuple(loc)) for p, loc in doc.locations.items()),
        "surprises": sorted((p, s.text, s.kind, s.style) for p, s in doc.surprises.items()),
        # block scalars only: their position maps a ConfigMap's config.yaml lines to the file
        "blocks": sorted((p, w) for p, w in doc.strings.items() if w[2] in ("|", ">")),
        "start": tuple(doc.start),
        "index": doc.index,
        "rest": tuple(doc.rest) if doc.rest else None,
    }


def _config(config: MigPartedConfig | None) -> dict | None:
    if config is None:
        return None
    return {
        "configs": repr(config.configs),
        "notes": _problems(config.notes),
        "locations": sorted((p, tuple(loc)) for p, loc in config.locations.items()),
    }


def _attempt(fn) -> object:
    try:
        return fn()
    except MigError as exc:
        return {"error": _problems(exc.problems)}


def _file(text: str | bytes, kw: dict) -> dict:
    contents = read_file(text, **kw)
    return {
        "manifests": contents.manifests,
        "sources": [(s.object, s.line, _config(s.config), _problems(s.problems)) for s in contents.sources],
        "skipped": [(s.kind, s.name, s.line, s.reason) for s in contents.skipped],
    }


# Each way of reading an input; the large shapes are read only in the ways that differ for them (a bare
# config is read by read_file exactly as by parse_config), to keep the test fast.
WAYS = {
    "text": lambda text, kw: hashlib.sha256(text if isinstance(text, bytes) else text.encode()).hexdigest(),
    "first": lambda text, kw: _attempt(lambda: _document(read_first(text, **kw))),
    "stream": lambda text, kw: _attempt(lambda: [_document(d) for d in read_stream(text, **kw)]),
    "config": lambda text, kw: _attempt(lambda: _config(parse_config(text, **kw))),
    "file": _file,
}
GROUP_WAYS = {"shape": ("text", "first", "config"), "shape-in-configmap": ("text", "config", "file")}


def read_all(name: str, text: str | bytes, limits: InputLimits | None = None) -> dict:
    """Everything the reader makes of one input, in every way it is read."""
    kw = {} if limits is None else {"limits": limits}
    ways = GROUP_WAYS.get(name.split(":", 1)[0], tuple(WAYS))
    return {way: WAYS[way](text, kw) for way in ways}


def as_configmap(text: str) -> str:
    return (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: default-mig-parted-config\n  namespace: gpu-operator\n"
        "data:\n  config.yaml: |\n" + "".join("    " + line + "\n" for line in text.splitlines())
    )


def inputs() -> dict[str, tuple[str | bytes, InputLimits | None]]:
    out: dict[str, tuple[str | bytes, InputLimits | None]] = {}
    for name, (gen, _) in _shapes.SHAPES.items():
        text = gen()
        out[f"shape:{name}"] = (text, None)
        wrapped = as_configmap(text)
        if len(wrapped.encode()) <= InputLimits().max_bytes:
            out[f"shape-in-configmap:{name}"] = (wrapped, None)
    for e in CORPUS:
        out[f"corpus:{e['id']}"] = (generate.input_bytes(e), None)
    for name, text in EXTRA.items():
        out[f"extra:{name}"] = (text, None)
    for name, (text, limits) in BOUNDED.items():
        out[f"bounded:{name}"] = (text, limits)
    return out


INPUTS = inputs()


def _record() -> None:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", "mig"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    digests = {}
    for name, (text, limits) in INPUTS.items():
        got = read_all(name, text, limits)
        digests[name] = {way: _digest(v) for way, v in got.items()}
    GOLDEN.write_text(
        json.dumps(
            {"recorded_at_commit": commit + (" (mig/ modified)" if dirty else ""), "digests": digests},
            indent=0,
            sort_keys=True,
        )
        + "\n"
    )
    print(f"recorded {len(digests)} inputs")


GOLDEN_DATA = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {"digests": {}}


def test_golden_covers_every_input() -> None:
    assert set(GOLDEN_DATA["digests"]) == set(INPUTS)
    assert len([n for n in INPUTS if n.startswith("corpus:")]) >= 300
    assert len([n for n in INPUTS if n.startswith("shape-in-configmap:")]) >= 4


@pytest.mark.parametrize("group", ["shape", "shape-in-configmap", "corpus", "extra", "bounded"])
def test_reader_output_matches_golden(group: str) -> None:
    changed = []
    for name, (text, limits) in INPUTS.items():
        if name.split(":", 1)[0] != group:
            continue
        got = {way: _digest(v) for way, v in read_all(name, text, limits).items()}
        want = GOLDEN_DATA["digests"][name]
        changed += [f"{name} ({way})" for way in set(want) | set(got) if got.get(way) != want.get(way)]
    assert not changed, f"the reader reads these differently: {changed[:20]} ({len(changed)} in all)"


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit(__doc__)
    _record()


def test_reader_makes_no_reference_cycles() -> None:
    """The reader pauses the cyclic collector (migops.mig.gcpause), which is only safe if reference counting
    frees everything it makes: values, locations, the tape of anchored events, and what an error leaves."""
    import gc

    texts: list[str | bytes] = [
        _shapes.distinct(configs=200),
        _shapes.aliases(configs=200),
        as_configmap(_shapes.repeated(configs=200)),
    ]
    texts += list(EXTRA.values())
    texts += [generate.input_bytes(e) for e in CORPUS[::7]]
    gc.collect()
    for text in texts:
        for way in ("first", "stream", "config", "file"):
            WAYS[way](text, {})
    assert gc.collect() == 0
