"""Fixtures of the deploy tests: the image's install tree built once per build context, rendered overlays.

`image` runs the Dockerfile's build stage here (deploy_helpers.build_image): the build context the .dockerignore leaves, and each
of that stage's RUN lines with the image's paths (/dist, /opt/migops) moved under a temporary folder.
Its ENV is not applied (PIP_NO_CACHE_DIR would only make the test slower). The result is the clean
virtualenv the final stage copies to /opt/migops, and the environment that stage sets.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from deploy_helpers import Image, cached_image, render


# Slow once per build context (about 70 s on 2 cores): the Dockerfile's build stage really runs, installing
# every wheel of requirements.lock with its hash checked. Kept in the image cache by the context's key
# (deploy_helpers.cached_image), as Docker keeps the image's layers: a session whose context was already
# built (a warm `make test`, a test rerun) reuses that tree with a fresh HOME and working directory.
@pytest.fixture(scope="session")
def image(tmp_path_factory: pytest.TempPathFactory) -> Image:
    return cached_image(tmp_path_factory.mktemp("image"))


@pytest.fixture(scope="session")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """`rendered(name)`: an overlay's documents, rendered once per session."""
    scratch = tmp_path_factory.mktemp("manifests")
    cache: dict[str, list[dict[str, Any]]] = {}

    def get(name: str) -> list[dict[str, Any]]:
        if name not in cache:
            cache[name] = render(name, scratch)
        return cache[name]

    yield get
