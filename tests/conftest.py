import textwrap
from pathlib import Path

import pytest


@pytest.fixture
def write_yaml(tmp_path: Path):
    """Write a YAML spec into tmp_path and return its path as a string."""

    def write(name: str, body: str) -> str:
        path = tmp_path / name
        path.write_text(textwrap.dedent(body))
        return str(path)

    return write
