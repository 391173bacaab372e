# The README's two commands: `make demo` and `make test`. Everything they need is set up here.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo demo-deploy test venv k8s-binaries host-packages bench bench-tools clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

# etcd, kube-apiserver, kube-scheduler, kubectl, and the real node's kubelet, kube-controller-manager,
# kube-proxy and containerd, built once from their Go modules into ~/.cache/migops/k8s/.
k8s-binaries:
	hack/k8s-binaries.sh >/dev/null

# The one place that installs Debian packages: what the real node (`migops local up --real-node`)
# and the image build need. apt-get runs only when one is missing, so a warm machine pays nothing.
host-packages:
	hack/host-packages.sh

test: venv k8s-binaries host-packages
	$(PY) -m pytest

demo: venv k8s-binaries
	$(PY) -m migops.demo

# migops in pods on the real node (root): local up --real-node, local image, local deploy, a MIG pod
# running for real. Separate from `demo`: the first image build alone takes ~4 min.
demo-deploy: venv k8s-binaries host-packages
	$(PY) -m migops.demo_deploy

# The load generator of bench/webhook_load.py (vegeta), built once into ~/.cache/migops/bench-bin.
bench-tools:
	hack/bench-tools.sh >/dev/null

bench: venv k8s-binaries bench-tools
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
