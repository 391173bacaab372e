# The README's two commands: `make demo` and `make test`. Everything they need is set up here.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo demo-deploy demo-fleet test test-unit lint generate lock release venv troubleshooting k8s-binaries k8s-control-plane flux-binaries argocd-binaries helm-binary host-packages bench bench-tools clean

venv: $(STAMP)

# The exact, hashed versions of requirements-dev.lock (runtime + test + lint), then migops itself,
# editable, without resolving anything again (docs/releasing.md: updating the locks).
$(STAMP): pyproject.toml requirements-dev.lock
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --require-hashes -r requirements-dev.lock
	$(PY) -m pip install -q --no-deps -e .
	touch $@

# ruff (lint, then format as a check) and mypy (strict on the MIG core), all configured in pyproject.toml.
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The generated files, written from their one source (hack/generate.py): the MigSync CRD from its types
# in api/migsync.py, manifests/ from the chart (helm, built once by hack/helm-binary.sh). Tests fail when
# one differs from a fresh render (docs/development/generated-files.md).
generate: venv
	$(PY) hack/generate.py

# The fast tier: every test that needs no API server (seconds, no binaries to build).
test-unit: venv
	$(PY) -m pytest -m "not cluster"

# After changing dependencies in pyproject.toml: re-resolve both locks (the image's runtime lock with the
# `suggest` extra, OR-Tools: the image runs the reconciler's spec.suggest), keeping every pin the ranges
# still allow (pip-compile --upgrade-package NAME moves one on purpose), with the hashes of each file.
PIP_COMPILE = $(PY) -m piptools compile -q --generate-hashes --strip-extras --allow-unsafe --no-emit-index-url --no-emit-find-links
lock: venv
	$(PY) -m pip install -q pip-tools==7.6.2
	$(PIP_COMPILE) --extra suggest -o requirements.lock pyproject.toml
	$(PIP_COMPILE) --extra suggest --extra test --extra lint --extra release -o requirements-dev.lock pyproject.toml

# etcd, kube-apiserver, kube-scheduler, kubectl, and the real node's kubelet, kube-controller-manager,
# kube-proxy and containerd, built once from their Go modules into ~/.cache/migops/k8s/.
k8s-binaries:
	hack/k8s-binaries.sh >/dev/null

# The control plane alone (etcd, kube-apiserver, kube-scheduler, kubectl): what the demo runs.
k8s-control-plane:
	hack/k8s-binaries.sh control-plane >/dev/null

# Flux's source-controller and kustomize-controller (tests/flux), built once into ~/.cache/migops/flux/.
flux-binaries:
	hack/flux-binaries.sh >/dev/null

# Argo CD's one binary (repo-server, application-controller; tests/argocd), built once into
# ~/.cache/migops/argocd/<version>/ with its CRDs and install manifest. Needs redis-server (host-packages).
argocd-binaries:
	hack/argocd-binaries.sh >/dev/null

# The one place that installs Debian packages: what the real node (`migops local up --real-node`)
# and the image build need. apt-get runs only when one is missing, so a warm machine pays nothing.
# helm v3.22.0, built once from its Go module into ~/.cache/migops/helm/ (the chart tests).
helm-binary:
	hack/helm-binary.sh >/dev/null

host-packages:
	hack/host-packages.sh

# Every test. hack/run_tests.py builds the control plane first, then builds the rest (host packages, the
# real node, helm, Flux, Argo CD) in the background while the tests that need only the control plane run,
# and ends with each build's time and one line per tier.
test: venv
	$(PY) hack/run_tests.py

# The venv's install (mostly downloads) and the control plane's first build (minutes of compiling) run
# side by side.
demo:
	@$(MAKE) --no-print-directory -j2 venv k8s-control-plane
	$(PY) -m migops.local.demo

# migops in pods on the real node (root): local up --real-node, local image, local deploy, a MIG pod
# running for real. Separate from `demo`: the first image build alone takes ~4 min.
demo-deploy: venv k8s-binaries host-packages
	$(PY) -m migops.local.demo_deploy

# A fleet of three local clusters rolled out by Flux (TOOL=argocd: Argo CD), a canary first (docs/fleet.md).
# Separate from `demo`: three control planes and a GitOps tool take minutes to start on 2 cores.
demo-fleet: venv k8s-control-plane $(if $(filter argocd,$(TOOL)),argocd-binaries host-packages,flux-binaries)
	$(PY) -m migops.local.demo_fleet

# A release into dist/ (emptied first): the wheel and sdist, the image as an OCI archive with its digest,
# the Helm chart, the image's SBOM, the notes and SHA256SUMS, all of pyproject.toml's version
# (docs/releasing.md). The image is `migops local image`'s build (dockerd: root).
release: venv helm-binary host-packages
	$(PY) hack/release.py --dist dist

# The load generator of bench/webhook_load.py (vegeta), built once into ~/.cache/migops/bench-bin.
bench-tools:
	hack/bench-tools.sh >/dev/null

bench: venv k8s-control-plane bench-tools
	$(PY) bench/run.py

# docs/troubleshooting.md from the reasons and rules the code declares with their explanations.
troubleshooting: venv
	$(PY) hack/troubleshooting.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
