"""The package's modules import each other without cycles (lazy imports inside functions count too):
a cycle kept alive by a lazy import is a layering mistake waiting to bite."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "hipporag"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """hipporag modules that `path` imports, wherever the import statement is."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                root = ".".join(base + ([node.module] if node.module else []))
            else:
                root = node.module or ""
            targets = [root] + [f"{root}.{a.name}" for a in node.names]
        else:
            continue
        found |= {t for t in targets if t in modules}
    return found - {name}


def import_graph() -> dict[str, set[str]]:
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    graph = {module_name(p): imports_of(p, modules) for p in paths}
    for name in list(graph):  # importing a.b runs a/__init__ first: a module outside a that imports a.b depends on a
        parents = {t.rsplit(".", 1)[0] for t in graph[name] if "." in t.removeprefix("hipporag.")}
        graph[name] |= {p for p in parents if p != name and not name.startswith(p + ".")}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node] = 2
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_import_graph_has_no_cycle():
    graph = import_graph()
    assert len(graph) > 20 and graph["hipporag.harness.experiment"]  # the parse sees the package
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle)


# The subpackages in the order data flows; a module may import its own subpackage and the ones before it,
# never one after it. The top-level modules (the commands and the run entry) sit above all of them.
LAYERS = (
    "core",
    "cache",
    "data",
    "prompts",
    "llm",
    "index",
    "retrieval",
    "eval",
    "harness",
    "report",
    "recheck",
    "paper",
)


def layer_of(module: str) -> int:
    """The layer of `hipporag.<layer>.<...>`; the package itself and its top-level modules are above all."""
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else len(LAYERS)


def test_every_module_lives_in_a_subpackage_of_the_layers_or_is_a_command():
    top = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
    from hipporag.cli import COMMANDS

    # the Python API, run.py's body, `hipporag` (cli) and the commands it lists that are modules of their own
    # (`report`: hipporag/report/__main__.py)
    commands = {module.split(".")[1] for module, _ in COMMANDS.values() if module.count(".") == 1}
    assert top == sorted({"api", "cli", "entry", *commands}), top
    assert sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()) == sorted(LAYERS)


def test_imports_go_down_the_layers_only():
    graph = import_graph()
    wrong = sorted(
        f"{a} imports {b}"
        for a, targets in graph.items()
        for b in targets
        if b != "hipporag" and layer_of(b) > layer_of(a)
    )
    assert not wrong, "\n".join(wrong)
