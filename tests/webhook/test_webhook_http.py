"""The webhook's HTTP surface, posted to directly over TLS: bad input is a 4xx (or a clean denial)
in milliseconds, never a 5xx or a hang; dry-run answers equal real ones; probes and metrics."""

from __future__ import annotations

import json
import socket
import ssl
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from webhook_helpers import CM_NAME, CM_NS, DEFAULT_CONFIG, configmap, review


def _body(resp) -> dict:
    assert resp.status == 200, resp.data[:300]
    return json.loads(resp.data)["response"]


@pytest.mark.parametrize(
    "body, fragment",
    [
        (b"{not json", "not JSON"),
        (b"\xff\xfe\x00garbage", "not JSON"),
        (b"[" * 100_000, "not JSON"),
        (b"[]", "JSON object"),
        (
            json.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}}),
            "apiVersion/kind",
        ),
        (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "Pod"}), "apiVersion/kind"),
        (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}), "request"),
        (json.dumps({**review(configmap("x")), "request": {**review(configmap("x"))["request"], "uid": ""}}), "uid"),
        (
            json.dumps(
                {**review(configmap("x")), "request": {**review(configmap("x"))["request"], "operation": "PATCH"}}
            ),
            "operation",
        ),
        (
            json.dumps({**review(configmap("x")), "request": {**review(configmap("x"))["request"], "object": None}}),
            "object",
        ),
        (
            json.dumps(
                {**review(configmap("x")), "request": {**review(configmap("x"))["request"], "kind": "ConfigMap"}}
            ),
            "kind",
        ),
    ],
)
def test_malformed_reviews_are_400_with_a_message(direct, body, fragment: str) -> None:
    started = time.monotonic()
    resp = direct.post("/validate", body)
    assert resp.status == 400 and fragment in resp.data.decode(), resp.data[:200]
    assert time.monotonic() - started < 5


def test_too_large_is_413_and_wrong_method_405_and_unknown_path_404(direct, hook) -> None:
    # Announce 9 MiB and send a little: the answer comes from the Content-Length alone, at once.
    host, port = hook.url.removeprefix("https://").split(":")
    ctx = ssl.create_default_context(cadata=(hook.certs / "ca-bundle.crt").read_text())
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        ctx.wrap_socket(raw, server_hostname=host) as tls,
    ):
        tls.sendall(
            b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {9 << 20}\r\n\r\n".encode()
            + b"{" * 1000
        )
        assert tls.recv(100).startswith(b"HTTP/1.1 413")
    assert direct.get("/validate").status == 405
    assert direct.post("/nothing", b"{}").status == 404


def test_chunked_bodies_are_read_and_limited(direct, hook) -> None:
    """The body is read from the server's stream (not werkzeug's): without a Content-Length too."""
    body = json.dumps(review(configmap(DEFAULT_CONFIG))).encode()
    resp = direct.pool.urlopen(
        "POST",
        "/validate",
        body=iter([body[:1000], body[1000:]]),
        chunked=True,
        headers={"Content-Type": "application/json"},
    )
    assert _body(resp)["allowed"] is True
    # 8 MiB in chunks (MAX_BODY, all of it read and counted), then the size line of one more: 413 at
    # that line. Not 9 MiB sent whole: the server closes after refusing, and a client still writing
    # the last MiB then met the close (EOF on send) before it read the answer, on a busy machine.
    host, port = hook.url.removeprefix("https://").split(":")
    ctx = ssl.create_default_context(cadata=(hook.certs / "ca-bundle.crt").read_text())
    chunk = b"%x\r\n%b\r\n" % (1 << 20, b" " * (1 << 20))
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        ctx.wrap_socket(raw, server_hostname=host) as tls,
    ):
        tls.sendall(
            b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" + chunk * 8 + b"%x\r\n" % (1 << 20)
        )
        assert tls.recv(100).startswith(b"HTTP/1.1 413")


def test_bad_contents_are_clean_denials(direct) -> None:
    for text in ("\udcff version: v1", "a: " + "[" * 100 + "]" * 100, "version: v1\n" + "x: 1\n" * 100_000):
        resp = _body(direct.post("/validate", review(configmap(text))))
        assert resp["allowed"] is False and resp["status"]["code"] == 422


def test_dry_run_is_answered_exactly_like_the_real_request(direct) -> None:
    bad = configmap("version: v1\nmig-configs:\n  x: [{devices: all, mig-enabled: true, mig-devices: {7g.99gb: 1}}]\n")
    for obj in (bad, configmap(DEFAULT_CONFIG)):
        for path in ("/validate", "/mutate"):
            real, dry = review(obj), review(obj, dry_run=True)
            dry["request"]["uid"] = real["request"]["uid"]
            assert direct.post(path, real).data == direct.post(path, dry).data


def test_probes_and_metrics(direct) -> None:
    assert direct.get("/healthz").status == 200
    assert direct.get("/readyz").data == b"ok\n"
    _body(direct.post("/validate", review(configmap("version: v1\nmig-configs: {}\n"))))
    text = direct.get("/metrics").data.decode()
    assert 'migops_webhook_requests_total{endpoint="validate",kind="ConfigMap",result="denied"}' in text
    assert 'migops_webhook_denials_total{rule="empty-mig-configs"}' in text
    assert "migops_webhook_request_duration_seconds_bucket" in text
    assert "migops_webhook_verdict_cache_total" in text


# ------------------------------------------------------------------------------------------ fuzz
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
_yamlish = st.one_of(
    st.text(max_size=400),
    st.text(alphabet="version: v1\nmig-configs:-[]{}&*!1g.5gb \"'#", max_size=300),
    st.builds(
        lambda name, body: f"version: v1\nmig-configs:\n  {name}:\n{body}",
        st.text(alphabet="abc-", min_size=1, max_size=8),
        st.text(
            alphabet="    - devices: all\nmig-enabled: true false\nmig-devices: {}\"1g.10gb\": 7 3g.40gb 2",
            max_size=200,
        ),
    ),
)
_ops = st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT"])


def _configmap_review(text: str, operation: str, labelled: bool) -> dict:
    obj = configmap(
        text,
        name=CM_NAME if not labelled else "fuzz",
        namespace=CM_NS,
        labels={"migops.io/mig-config": "true"} if labelled else None,
    )
    return review(
        obj if operation != "DELETE" else None,
        operation=operation,
        old=configmap(DEFAULT_CONFIG) if operation in ("UPDATE", "DELETE") else None,
    )


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(text=_yamlish, operation=_ops, labelled=st.booleans(), path=st.sampled_from(["/validate", "/mutate"]))
def test_fuzz_configmap_contents(direct, text: str, operation: str, labelled: bool, path: str) -> None:
    from migops.mig.problems import MigError
    from migops.mig.spec import parse_config

    started = time.monotonic()
    resp = direct.post(path, _configmap_review(text, operation, labelled))
    assert time.monotonic() - started < 5, "no hang"
    assert resp.status in (200, 400), resp.data[:300]
    if resp.status == 200 and path == "/validate" and operation in ("CREATE", "UPDATE"):
        if _body(resp)["allowed"]:  # garbage is never admitted
            try:
                parse_config(text)
            except MigError as exc:
                pytest.fail(f"admitted an unparseable config: {exc}")


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    request=st.dictionaries(
        st.sampled_from(["uid", "kind", "operation", "object", "oldObject", "name", "namespace", "dryRun", "resource"]),
        _json,
        max_size=9,
    ),
    kind=st.sampled_from(["ConfigMap", "Node", "Pod", "ClusterPolicy", "Secret", ""]),
    operation=_ops,
    obj=_json,
    path=st.sampled_from(["/validate", "/mutate"]),
)
def test_fuzz_arbitrary_reviews(direct, request: dict, kind: str, operation: str, obj, path: str) -> None:
    base = review(
        {"kind": kind, "metadata": {"name": "x", "namespace": CM_NS}, "data": obj, "spec": obj},
        operation=operation,
        kind=kind,
        group="nvidia.com" if kind == "ClusterPolicy" else "",
    )
    base["request"].update(request)
    started = time.monotonic()
    resp = direct.post(path, base)
    assert time.monotonic() - started < 5, "no hang"
    assert resp.status in (200, 400), (resp.status, resp.data[:300])
    if resp.status == 200:
        body = json.loads(resp.data)["response"]
        assert body["uid"] == base["request"]["uid"] and isinstance(body["allowed"], bool)


# ------------------------------------------------------------------------------------------ shapes and sizes
# A list or dict where a label or annotation value belongs, a string where
# metadata belongs (each an `unhashable type` 500 if not caught), values beyond Kubernetes' limits (which the
# verdict cache's keys must not keep).
_value = st.one_of(
    st.text(max_size=10),
    st.integers(),
    st.none(),
    st.booleans(),
    st.lists(st.text(max_size=3), max_size=2),
    st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
    st.just("v" * 64),
    st.just("x" * 300_000),
)
_keys = st.sampled_from(
    [
        "nvidia.com/mig.config",
        "nvidia.com/gpu.count",
        "migops.io/gpu.device-id",
        "migops.io/gpus",
        "migops.io/managed-by",
        "migops.io/unmanaged",
        "migops.io/mig-config",
        "k" * 400,
    ]
)
_mapping = st.one_of(st.dictionaries(_keys, _value, max_size=3), _value)
_metadata = st.one_of(
    st.fixed_dictionaries(
        {"name": st.one_of(st.just("gpu-node-1"), st.just("n" * 300), _value)},
        optional={"labels": _mapping, "annotations": _mapping, "namespace": _value, "managedFields": _value},
    ),
    _value,
)


@settings(
    max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    kind=st.sampled_from(["Node", "ConfigMap", "Pod", "ClusterPolicy"]),
    operation=st.sampled_from(["CREATE", "UPDATE"]),
    meta=_metadata,
    old_meta=_metadata,
    status=st.one_of(_value, st.fixed_dictionaries({"capacity": _mapping})),
    user=st.one_of(st.none(), _value, st.fixed_dictionaries({"username": _value, "groups": _value})),
    path=st.sampled_from(["/validate", "/mutate"]),
)
def test_fuzz_badly_typed_and_oversized_fields(direct, kind, operation, meta, old_meta, status, user, path) -> None:
    obj = {"kind": kind, "metadata": meta, "status": status, "data": {"config.yaml": DEFAULT_CONFIG}, "spec": {}}
    old = {"kind": kind, "metadata": old_meta} if operation == "UPDATE" else None
    body = review(
        {"metadata": {"name": "gpu-node-1", "namespace": CM_NS}},
        operation=operation,
        kind=kind,
        group="nvidia.com" if kind == "ClusterPolicy" else "",
    )
    body["request"].update({"object": obj, "oldObject": old, "userInfo": user})
    started = time.monotonic()
    resp = direct.post(path, body)
    assert time.monotonic() - started < 5, "no hang"
    assert resp.status in (200, 400), (resp.status, resp.data[:300])
    if resp.status == 200:
        answer = json.loads(resp.data)["response"]
        assert answer["uid"] == body["request"]["uid"]
        labels = meta.get("labels") if isinstance(meta, dict) else None
        if isinstance(labels, dict) and any(len(v) > 63 for v in labels.values() if isinstance(v, str)):
            assert answer["allowed"] is False and "[object-limits]" in answer["status"]["message"]
    else:
        assert b"bad AdmissionReview: request." in resp.data, resp.data[:300]


def test_badly_typed_fields_are_400_naming_the_field(direct) -> None:
    node = {"metadata": {"name": "gpu-node-1", "labels": {"nvidia.com/mig.config": ["all-balanced"]}}}
    for obj, field in (
        (node, 'metadata.labels["nvidia.com/mig.config"]: must be a string'),
        ({"metadata": "gpu-node-1"}, "request.object.metadata: must be an object"),
        ({"metadata": {"name": "x", "annotations": {"migops.io/gpus": {"a": 1}}}}, "annotations"),
    ):
        resp = direct.post("/validate", review(obj, operation="CREATE", kind="Node"))
        assert resp.status == 400 and field in resp.data.decode(), resp.data[:300]


def test_oversized_label_values_are_denied_before_any_work(direct) -> None:
    node = {"metadata": {"name": "gpu-node-1", "labels": {"nvidia.com/mig.config": "a" * (4 << 20)}}}
    answer = _body(direct.post("/validate", review(node, operation="CREATE", kind="Node")))
    assert answer["allowed"] is False and "[object-limits]" in answer["status"]["message"]
    assert "at most 63 characters" in answer["status"]["message"]
