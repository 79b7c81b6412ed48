"""The package's shape: every public name resolves to the module that owns it, and no two modules
import each other (DESIGN.md: the flow goes one way)."""

import ast
import importlib
from pathlib import Path

import pytest

import pytest_llmreplay

PACKAGE = Path(pytest_llmreplay.__file__).parent


@pytest.mark.parametrize("name", pytest_llmreplay.__all__)
def test_every_public_name_resolves_to_its_owner(name):
    value = getattr(pytest_llmreplay, name)
    owner = pytest_llmreplay._EXPORTS[name]
    module_name = owner[0] if isinstance(owner, tuple) else owner
    module = importlib.import_module(f"pytest_llmreplay.{module_name}")
    assert any(value is getattr(module, attribute, None) for attribute in vars(module)), (
        f"{name} is not defined by {module_name}"
    )


def module_imports() -> dict[str, set[str]]:
    """Each module of the package -> the package's modules it imports, lazily (in a function) or not."""
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        module = ".".join(parts).removesuffix(".__init__")
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
                imported.update([target, *(f"{target}.{alias.name}" for alias in node.names)])
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pytest_llmreplay"):
                imported.update([node.module, *(f"{node.module}.{alias.name}" for alias in node.names)])
        graph[module] = imported
    return {
        module: {
            other for other in imported if other in graph and other != module and not module.startswith(other + ".")
        }
        for module, imported in graph.items()
    }


def test_no_two_modules_import_each_other():
    graph = module_imports()
    assert (
        len(graph) > 40 and "pytest_llmreplay.metrics.slo" in graph["pytest_llmreplay.plugin.verdict"]
    )  # the graph is read, not empty
    pairs = sorted({tuple(sorted((a, b))) for a in graph for b in graph[a] if a in graph[b]})
    assert pairs == []


def test_the_docs_name_every_key_of_the_marker_and_of_spec_files():
    """A key the spec accepts but the docs (docs/perf-tests.md) do not list is one a user cannot know of."""
    import re

    from pytest_llmreplay.plugin.spec import SETTING_TYPES, SPEC_KEYS

    page = (PACKAGE.parent / "docs" / "perf-tests.md").read_text()
    paragraph = page[page.index("Keys of the marker and of spec files:") :].split("\n\n")[0]
    listed = set(re.findall(r"`(\w+)`", paragraph))
    assert set(SPEC_KEYS) | set(SETTING_TYPES) <= listed, sorted((set(SPEC_KEYS) | set(SETTING_TYPES)) - listed)
