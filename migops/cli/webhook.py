"""`migops webhook` (serve the admission webhook) and `migops certs generate|rotate|show`."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from migops import logs
from migops.cli.usage import EXIT_OK, UsageError
from migops.kube import client as kube_client

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from migops.certs.publish import SecretStore
    from migops.certs.rotation import DirectoryStore


def register(sub: argparse._SubParsersAction) -> None:
    _register_webhook(sub)
    _register_certs(sub)


def _register_webhook(sub: argparse._SubParsersAction) -> None:
    w = sub.add_parser(
        "webhook",
        help="serve the validating + mutating admission webhook (TLS)",
        description="Serve POST /validate and /mutate (AdmissionReview v1), /healthz, /readyz and "
        "/metrics with gunicorn (gthread workers, keep-alive) over TLS. Cluster state comes from "
        "watches on the API server named by --kubeconfig and --context (found as kubectl finds it).",
    )
    w.add_argument(
        "--tls-cert",
        required=True,
        metavar="FILE",
        help="serving certificate (PEM); re-read for each new connection, so a rotated file is used without a restart",
    )
    w.add_argument("--tls-key", required=True, metavar="FILE", help="its private key (may be the same file)")
    w.add_argument("--port", type=int, default=8443, metavar="N", help="port (default 8443)")
    w.add_argument("--bind-address", default="0.0.0.0", metavar="ADDR", help="address (default 0.0.0.0)")
    kube_client.add_arguments(w)
    w.add_argument("--workers", type=int, default=1, metavar="N", help="worker processes (default 1)")
    w.add_argument(
        "--threads",
        type=int,
        default=16,
        metavar="N",
        help="threads per worker (default 16: at least the connections the API server keeps open)",
    )
    logs.add_arguments(w)
    w.add_argument(
        "--reconciler-user",
        action="append",
        default=None,
        metavar="USER",
        help="the reconciler's identity (repeatable): the only one allowed to change nvidia.com/mig.config "
        "on a node a MigSync manages (default system:serviceaccount:migops-system:migops-reconciler)",
    )
    w.set_defaults(func=cmd_webhook)


def _register_certs(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser(
        "certs",
        help="the webhook's CA and serving certificate",
        description="Create, rotate and show the webhook's certificates, in a directory or a "
        "Kubernetes Secret, and publish the CA bundle into its webhook configurations.",
    )
    cmds = c.add_subparsers(dest="certs_command", metavar="SUBCOMMAND", required=True)
    for name, helptext in (
        ("generate", "create a CA and serving certificate (or renew them if due); publish nothing"),
        ("rotate", "renew what is due, publish the CA bundle (old + new CA while switching)"),
        ("show", "print the CA bundle and serving certificate: subjects, SANs, expiry"),
    ):
        _certs_command(cmds.add_parser(name, help=helptext, description=helptext), name)


def _certs_command(p: argparse.ArgumentParser, name: str) -> None:
    """One `migops certs` subcommand: where the certificates are, and (but for show) what to renew."""
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--dir",
        type=Path,
        metavar="DIR",
        help="a directory (ca.crt, ca.key, ca-bundle.crt, tls.pem = key + certificate, tls.crt, tls.key)",
    )
    where.add_argument("--secret", metavar="NAMESPACE/NAME", help="a kubernetes.io/tls Secret")
    kube_client.add_arguments(p)
    if name == "show":
        p.set_defaults(func=cmd_certs_show)
        return
    p.add_argument("--service", default="migops-webhook", help="Service name for the DNS SANs (default migops-webhook)")
    p.add_argument("--namespace", default="migops-system", help="its namespace (default migops-system)")
    p.add_argument("--dns", action="append", default=[], metavar="NAME", help="another DNS SAN (repeatable)")
    p.add_argument(
        "--ip", action="append", default=None, metavar="IP", help="an IP SAN (repeatable; default 127.0.0.1)"
    )
    p.add_argument(
        "--renew-before",
        type=float,
        default=30.0,
        metavar="DAYS",
        help="renew what expires within this many days (default 30)",
    )
    p.add_argument("--force", action="store_true", help="renew the CA and serving certificate now")
    if name == "rotate":
        p.add_argument(
            "--webhook-configuration",
            action="append",
            default=None,
            metavar="NAME",
            help="configuration(s) to write the caBundle into (default migops-webhook)",
        )
        p.add_argument(
            "--settle",
            type=float,
            default=10.0,
            metavar="SECONDS",
            help="after publishing a new CA, wait this long before serving from it (default 10)",
        )
    p.set_defaults(func=cmd_certs_rotate if name == "rotate" else cmd_certs_generate)


def cmd_webhook(args: argparse.Namespace) -> int:
    from migops.webhook import server

    server.prepare_metrics_dir(args.workers)  # before anything imports prometheus_client
    if args.workers < 1 or args.threads < 1:
        raise UsageError("--workers and --threads must be at least 1")
    options = server.gunicorn_options(
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        bind=args.bind_address,
        port=args.port,
        workers=args.workers,
        threads=args.threads,
        log_level=args.log_level,
        log_format=args.log_format,
    )
    try:
        server.serve(options, server.app_from_kubeconfig(args.kubeconfig, args.context, args.reconciler_user or ()))
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from None
    return EXIT_OK


def _api(args: argparse.Namespace) -> ApiClient:
    from kubernetes.config.config_exception import ConfigException

    try:
        return kube_client.api_client(args.kubeconfig, args.context)
    except (ConfigException, OSError) as exc:
        raise UsageError(f"no cluster to talk to: {exc}") from None


def _store(args: argparse.Namespace) -> DirectoryStore | SecretStore:
    from migops.certs.publish import SecretStore
    from migops.certs.rotation import DirectoryStore

    if args.dir is not None:
        return DirectoryStore(args.dir)
    namespace, _, name = args.secret.partition("/")
    if not namespace or not name:
        raise UsageError("--secret must be NAMESPACE/NAME")
    return SecretStore(_api(args), namespace, name)


def _rotate(args: argparse.Namespace, publish: Callable[[bytes], None]) -> int:
    from migops.certs.rotation import rotate, service_dns_names

    ips = args.ip if args.ip is not None else ["127.0.0.1"]
    dns = service_dns_names(args.service, args.namespace) + args.dns
    settle = getattr(args, "settle", 0.0)
    result = rotate(
        _store(args),
        dns_names=dns,
        ip_addresses=ips,
        publish=publish,
        settle=lambda: time.sleep(settle),
        renew_before=dt.timedelta(days=args.renew_before),
        force=args.force,
    )
    for step in result.steps or ["nothing due"]:
        print(f"migops certs: {step}")
    return EXIT_OK


def cmd_certs_generate(args: argparse.Namespace) -> int:
    return _rotate(args, lambda bundle: None)


def cmd_certs_rotate(args: argparse.Namespace) -> int:
    from migops.certs.publish import publish_ca_bundle

    api = _api(args)
    names = args.webhook_configuration or ["migops-webhook"]

    def publish(bundle: bytes) -> None:
        written = publish_ca_bundle(api, bundle, names)
        print(f"migops certs: caBundle written to {', '.join(written) or 'no configuration (none exists yet)'}")

    return _rotate(args, publish)


def cmd_certs_show(args: argparse.Namespace) -> int:
    from cryptography import x509

    from migops.certs.rotation import certificates

    m = _store(args).load()
    if m.serving is None:
        print("migops certs: no serving certificate", file=sys.stderr)
        return 1
    now = dt.datetime.now(dt.UTC)

    def line(cert: x509.Certificate) -> str:
        left = cert.not_valid_after_utc - now
        return f"{cert.subject.rfc4514_string()}  expires {cert.not_valid_after_utc:%Y-%m-%d %H:%M}Z ({left.days} days)"

    serving = x509.load_pem_x509_certificate(m.serving.cert_pem)
    print(f"serving: {line(serving)}")
    try:
        sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        print("  SANs: " + ", ".join(str(v.value) for v in sans))
    except x509.ExtensionNotFound:
        pass
    for cert in certificates(m.bundle):
        print(f"bundle CA: {line(cert)}")
    return EXIT_OK
