"""The docs: a short README whose first screen holds the two commands, a site whose pages exist and link, and Python
examples that run. CI regenerates every console block (`cog --check`) and builds the site (`mkdocs build --strict`)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_readme_is_a_landing_page_with_the_two_commands_first():
    lines = README.splitlines()
    assert len(lines) <= 150
    first_screen = "\n".join(lines[:12])
    assert "pip install . && roofline estimate" in first_screen
    assert "pip install '.[test]' && pytest" in first_screen


def test_every_page_the_site_and_the_readme_name_exists():
    import yaml

    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]

    def pages(entries):
        for entry in entries:
            for value in entry.values():
                yield from pages(value) if isinstance(value, list) else [value]

    named = list(pages(nav))
    assert all((ROOT / "docs" / page).is_file() for page in named), named
    on_disk = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert on_disk == set(named)  # no page left out of the navigation
    for link in re.findall(r"\]\((docs/[^)#]+)\)", README):
        assert (ROOT / link).exists(), link


def test_relative_links_between_pages_resolve():
    for page in (ROOT / "docs").rglob("*.md"):
        for link in re.findall(r"\]\(([^)#:]+\.(?:md|png))(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / link).resolve().exists(), (page, link)


def python_blocks():
    for page in sorted((ROOT / "docs").rglob("*.md")):
        for k, block in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(), re.S)):
            yield pytest.param(block, id=f"{page.name}#{k}")


@pytest.mark.parametrize("block", list(python_blocks()))
def test_python_examples_run(block, capsys):
    exec(compile(block, "<docs>", "exec"), {})


def test_console_examples_are_generated_except_the_recorded_ones():
    # Every console block is a cog block (produced by running the command) unless it needs torch, a GPU, a model
    # file or a network, and then it says it was recorded or shows a command without output.
    for page in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]:
        text = page.read_text()
        for match in re.finditer(r"```console\n(.*?)```\n", text, re.S):
            before = text[: match.start()].rstrip().splitlines()[-1] if text[: match.start()].strip() else ""
            generated = before.endswith("]]] -->") and "[[[end]]]" not in before
            commands_only = all(line.startswith("$ ") or not line.strip() for line in match.group(1).splitlines())
            recorded = "recorded" in "\n".join(text[: match.start()].splitlines()[-4:]).lower()
            assert generated or commands_only or recorded, (page, match.group(1)[:80])
