"""The layout the README's design section describes, kept by a test: engines import no solver or baseline,
the package's imports have no cycle, no source file runs over 400 lines and no function over 60 (the numba
kernel of the pipeline DP aside: one compiled loop reads better whole)."""

import ast
from pathlib import Path

import networkx as nx

SRC = Path(__file__).parents[1] / "src"
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60
LONG_ALLOWED = {("diviml.solvers.pipeline.dp_kernel", "walk_from")}


def modules() -> dict[str, ast.Module]:
    out = {}
    for path in sorted((SRC / "diviml").rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = ast.parse(path.read_text(), filename=str(path))
    return out


def imports(name: str, tree: ast.Module, *, top_level_only: bool) -> set[str]:
    """The diviml modules ``name`` imports (at module level only, or anywhere)."""
    package = name if (SRC / name.replace(".", "/") / "__init__.py").exists() else name.rpartition(".")[0]
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    out = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:  # "from . import x" may import a module x
                candidate = f"{target}.{alias.name}"
                out.add(candidate if _is_module(candidate) else target)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return {m for m in out if m.startswith("diviml")}


def _is_module(name: str) -> bool:
    path = SRC / name.replace(".", "/")
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def test_engines_import_no_solver_and_no_baseline():
    for name, tree in modules().items():
        if name.startswith("diviml.solvers.engines"):
            bad = {m for m in imports(name, tree, top_level_only=False)
                   if m.startswith("diviml.solvers") and not m.startswith("diviml.solvers.engines")}
            assert not bad, f"{name} imports {sorted(bad)}"


def test_the_module_level_imports_have_no_cycle():
    graph = nx.DiGraph()
    for name, tree in modules().items():
        for target in imports(name, tree, top_level_only=True):
            # a module importing its own package's __init__ (re-exports) is not an arrow back into it
            if not name.startswith(target + "."):
                graph.add_edge(name, target)
    cycles = list(nx.simple_cycles(graph))
    assert not cycles, f"import cycles: {cycles[:3]}"


def test_no_source_file_over_400_lines_and_no_function_over_60():
    long_files, long_functions = [], []
    for path in sorted((SRC / "diviml").rglob("*.py")):
        lines = path.read_text().count("\n")
        if lines > MAX_FILE_LINES:
            long_files.append(f"{path.relative_to(SRC)} ({lines})")
    for name, tree in modules().items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES and (name, node.name) not in LONG_ALLOWED:
                    long_functions.append(f"{name}.{node.name} ({length})")
    assert not long_files, long_files
    assert not long_functions, long_functions
