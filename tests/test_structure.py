"""The package's shape: no import cycles, one-way edges between the packages, and one answer per quantity."""

import ast
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from roofline.cli import app
from roofline.specs.catalog import catalog

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "roofline"
runner = CliRunner()
# Packages that the calculator and the specs must never reach, at module level or inside a function.
FORBIDDEN = {
    "roofline.calc": ("roofline.cli", "roofline.render", "roofline.measure", "torch", "matplotlib", "numpy"),
    "roofline.specs": (
        "roofline.cli",
        "roofline.render",
        "roofline.measure",
        "roofline.calc",
        "torch",
        "matplotlib",
        "numpy",
    ),
    "roofline.render": ("roofline.cli", "roofline.measure", "torch"),
    "roofline.measure": ("roofline.cli", "roofline.render"),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports(path: Path, known: set[str]) -> set[str]:
    """Every module `path` imports, at module level or inside functions; `from a import b` is a.b when b is a module."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in known else node.module)
    return found


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports(path, set(mods)) for name, path in mods.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """A cycle among the nodes of `edges` (as a path that returns to its start), or None."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in edges:
                continue
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_cycle_finder_finds_a_planted_cycle():
    # a -> b -> c -> a is a cycle; d -> a is not part of it.
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycles():
    assert find_cycle(graph()) is None


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_forbidden_edges(package):
    bad = [
        f"{module} -> {target}"
        for module, targets in graph().items()
        if module == package or module.startswith(package + ".")
        for target in targets
        for banned in FORBIDDEN[package]
        if target == banned or target.startswith(banned + ".")
    ]
    assert bad == []


def test_the_graph_sees_function_level_imports():
    # cli.estimate imports the calculator inside its commands only; the walker must still see that edge.
    assert "roofline.calc.estimate" in graph()["roofline.cli.estimate"]


def test_public_api():
    import roofline

    assert set(roofline.__all__) == {
        "Estimate",
        "Hardware",
        "Knobs",
        "Model",
        "RooflineError",
        "UsageError",
        "compare",
        "estimate",
        "load_hardware",
        "load_model",
        "sweep",
    }
    assert all(hasattr(roofline, name) for name in roofline.__all__)


CONFIG = {  # a Qwen2-style config.json, as its model card publishes it (Qwen2.5-0.5B's shapes)
    "model_type": "qwen2",
    "hidden_size": 896,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "intermediate_size": 4864,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-6,
}


@pytest.mark.parametrize("ref", [*catalog("models"), "config"])
def test_models_show_and_estimate_agree(ref, tmp_path):
    if ref == "config":
        (tmp_path / "config.json").write_text(json.dumps(CONFIG))
        ref = str(tmp_path / "config.json")
    shown = json.loads(runner.invoke(app, ["models", "show", ref, "--json"]).stdout)
    r = runner.invoke(app, ["estimate", "-m", ref, "-H", "h200", "--output", "2", "--json", "-q"])
    estimated = json.loads(r.stdout)
    assert estimated["model"]["params"] == shown["params"]
    assert estimated["model"]["active_params"] == shown.get("active_params", shown["params"])
    assert estimated["kv_bytes_per_token"] == shown["kv_bytes_per_token"]


def test_deepseek_kv_is_at_its_kv_dtype():
    # DeepSeek-V3 stores fp8 weights and a bf16 latent cache: 61 layers x (512 + 64) x 2 B = 70,272 B/token.
    shown = json.loads(runner.invoke(app, ["models", "show", "deepseek-v3", "--json"]).stdout)
    assert shown["kv_bytes_per_token"] == 61 * (512 + 64) * 2
