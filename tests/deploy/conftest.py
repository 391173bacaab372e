"""Fixtures of the deploy tests: the image's install tree built once per session, rendered overlays.

`image` runs the Dockerfile's build stage here (deploy_helpers.build_image): the build context the .dockerignore leaves, and each
of that stage's RUN lines with the image's paths (/dist, /opt/migops) moved under a temporary folder.
Its ENV is not applied (PIP_NO_CACHE_DIR would only make the test slower). The result is the clean
virtualenv the final stage copies to /opt/migops, and the environment that stage sets.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from deploy_helpers import Image, build_image, render


# Slow once a session (about 70 s on 2 cores): the Dockerfile's build stage really runs, installing every
# wheel of requirements.lock with its hash checked.
@pytest.fixture(scope="session")
def image(tmp_path_factory: pytest.TempPathFactory) -> Image:
    return build_image(tmp_path_factory.mktemp("image"))


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
