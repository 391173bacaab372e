# The README's two commands: `make demo` and `make test`. Everything they need is set up here.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo test venv k8s-binaries flux-binaries bench bench-tools clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

# etcd, kube-apiserver and kubectl, built once from their Go modules into ~/.cache/migops/k8s/.
k8s-binaries:
	hack/k8s-binaries.sh >/dev/null

# Flux's source-controller and kustomize-controller (tests/flux), built once into ~/.cache/migops/flux/.
flux-binaries:
	hack/flux-binaries.sh >/dev/null

test: venv k8s-binaries flux-binaries
	$(PY) -m pytest

demo: venv k8s-binaries
	$(PY) -m migops.demo

# The load generator of bench/webhook_load.py (vegeta), built once into ~/.cache/migops/bench-bin.
bench-tools:
	hack/bench-tools.sh >/dev/null

bench: venv k8s-binaries bench-tools
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
