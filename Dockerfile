# syntax=docker/dockerfile:1
# One image for every migops component (docs/deploy-image.md):
#   webhook      gunicorn -c python:migops.webhook.gunicorn_conf
#   reconciler   migops reconcile ...          (the entrypoint: its manifest passes args only)
#   agent        migops agent --backend nvml   (NVML from the host's driver at run time, never from here)
#   certs job    migops certs rotate ...
# No build tools, no pip and no shell scripts of ours in the final stage; non-root by default; nothing
# is written under / at run time (readOnlyRootFilesystem: the manifests mount /tmp where needed).
# tests/deploy/test_deploy_image.py runs this file's build-stage RUN lines on the same context (.dockerignore
# applied) into a clean virtualenv and starts every entrypoint named here and in manifests/.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
# A virtualenv with the exact, hashed versions of requirements.lock (never a fresh resolve from
# pyproject's ranges: the image is what CI tested), in a layer of its own before the rest of the context:
# a change to migops' code rebuilds only the wheel below, not the hundred-odd MB of locked wheels.
COPY requirements.lock .
RUN python -m venv /opt/migops \
 && /opt/migops/bin/python -m pip install --require-hashes --only-binary=:all: -r requirements.lock
COPY . .
# The wheel (migops.* only, tests/packaging checks it) on top with --no-deps; pip compiles the bytecode
# now, so nothing needs a writable site-packages later. tests/deploy/test_deploy_image.py checks the tree
# equals the lock.
RUN python -m pip wheel --no-deps --wheel-dir /dist . \
 && /opt/migops/bin/python -m pip install --no-deps /dist/migops-*.whl \
 && /opt/migops/bin/python -m pip uninstall --yes setuptools pip

FROM ${PYTHON_IMAGE}
# The reconciler fetches with git (ssh:// through openssh-client) and verifies commit signatures with
# ssh-keygen (openssh-client) and gpgv. Nothing else is added to the base image. A base that has them
# already (`migops local image` builds one from Debian packages, with no registry) skips apt.
RUN if dpkg-query --show --showformat='${db:Status-Status} ' git openssh-client gpgv 2>/dev/null \
      | grep --quiet --extended-regexp '^(installed ){3}$'; then echo "git, openssh-client, gpgv: in the base"; \
    else apt-get update \
      && apt-get install --yes --no-install-recommends git openssh-client gpgv \
      && rm -rf /var/lib/apt/lists/*; fi
COPY --from=build /opt/migops /opt/migops
ENV PATH=/opt/migops/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp
# The release's version (pyproject.toml's; tests/packaging checks the default) and commit, as OCI labels:
#   docker build --build-arg VERSION=0.1.0 --build-arg REVISION=$(git rev-parse HEAD) .
ARG VERSION=0.1.0
ARG REVISION=""
LABEL org.opencontainers.image.title="migops" \
      org.opencontainers.image.description="Declarative, GitOps-managed NVIDIA MIG partitioning for Kubernetes" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
# The manifests' runAsUser; the agent alone overrides it with 0 (MIG changes need root on the GPUs).
USER 65532:65532
ENTRYPOINT ["migops"]
CMD ["--help"]
