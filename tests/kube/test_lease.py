"""migops.kube.lease against the real API server: one leader, release, takeover after expiry."""

from __future__ import annotations

import threading
import time

from kubernetes import client as k8s

from migops.kube.lease import LeaderElector


def _elector(api, namespace: str, who: str) -> LeaderElector:
    return LeaderElector(api, namespace, "test-lease", who, lease_duration=2, renew_deadline=1.5, retry_period=0.2)


def test_one_leader_release_and_takeover(admin, namespace) -> None:
    a, b = _elector(admin, namespace, "a"), _elector(admin, namespace, "b")
    stop_a, stop_b = threading.Event(), threading.Event()
    ta = threading.Thread(target=a.run, args=(stop_a,), daemon=True)
    ta.start()
    assert a.leading.wait(10)
    tb = threading.Thread(target=b.run, args=(stop_b,), daemon=True)
    tb.start()
    time.sleep(1.0)
    assert not b.leading.is_set()  # a renews: b waits
    stop_a.set()
    ta.join(10)  # a releases the Lease on the way out
    assert b.leading.wait(5)
    lease = k8s.CoordinationV1Api(admin).read_namespaced_lease("test-lease", namespace)
    assert lease.spec.holder_identity == "b" and lease.spec.lease_transitions == 1
    stop_b.set()
    tb.join(10)


def test_a_dead_leader_is_replaced_after_the_lease_expires(admin, namespace) -> None:
    dead = _elector(admin, namespace, "dead")
    assert dead._try_acquire_or_renew()
    b = _elector(admin, namespace, "b")
    stop = threading.Event()
    began = time.monotonic()
    t = threading.Thread(target=b.run, args=(stop,), daemon=True)
    t.start()
    assert b.leading.wait(10)
    assert time.monotonic() - began >= 1.9  # not before the 2 s lease ran out
    stop.set()
    t.join(10)


def test_losing_the_lease_stops_leading(admin, namespace) -> None:
    a = _elector(admin, namespace, "a")
    stopped = threading.Event()
    stop = threading.Event()
    t = threading.Thread(target=lambda: a.run(stop, on_stopped=stopped.set), daemon=True)
    t.start()
    assert a.leading.wait(10)
    coord = k8s.CoordinationV1Api(admin)
    lease = coord.read_namespaced_lease("test-lease", namespace)
    lease.spec.holder_identity = "usurper"  # someone else holds it now: a cannot renew
    lease.spec.renew_time = None
    coord.replace_namespaced_lease("test-lease", namespace, lease)
    assert stopped.wait(10) and not a.leading.is_set()
    stop.set()
    t.join(10)
