"""Every maxk_jax module imports in a fresh interpreter; maxk_jax.execution has no import cycle
(its import graph, read from the source with ``ast``, is acyclic); its public API is complete."""
import ast
import os
import subprocess
import sys
from pathlib import Path

import maxk_jax
import maxk_jax.execution as execution

ROOT = Path(maxk_jax.__file__).resolve().parent.parent
EXECUTION = "maxk_jax.execution"


def module_names(package: str = "maxk_jax") -> list[str]:
    """Dotted names of every module of ``package`` (a package is named by its __init__)."""
    base = ROOT / package.replace(".", "/")
    names = []
    for path in sorted(base.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names.append(".".join(parts))
    return names


def _source(module: str) -> Path:
    path = ROOT / module.replace(".", "/")
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def import_graph(package: str) -> dict[str, set[str]]:
    """Module -> modules of ``package`` it imports anywhere in its source (function bodies included).

    ``from pkg import name`` points at the submodule ``pkg.name`` when that is a module, else at
    ``pkg`` itself (its __init__), which is what Python executes.
    """
    modules = set(module_names(package))
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module in modules:
        tree = ast.parse(_source(module).read_text(), filename=str(_source(module)))
        is_package = _source(module).name == "__init__.py"
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:   # relative import: resolve against this module's package
                    anchor = module.split(".")[:len(module.split(".")) - node.level + is_package]
                    source = ".".join(anchor + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in modules:      # `import a.b.c` names a.b.c (else a parent)
                    target = target.rpartition(".")[0]
                if target and target != module:
                    graph[module].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a list of nodes (first == last), or None if it is acyclic."""
    state: dict[str, int] = {}         # 1 = on the DFS stack, 2 = done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_find_cycle_finds_cycles() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"a"}}) == ["a", "a"]


def test_execution_import_graph_is_acyclic() -> None:
    graph = import_graph(EXECUTION)
    assert find_cycle(graph) is None, f"import cycle in {EXECUTION}: {' -> '.join(find_cycle(graph))}"
    backends = {f"{EXECUTION}.{name}" for name in ("embedded", "http_client", "sandboxfusion", "caching")}
    protocol = f"{EXECUTION}.executor"
    assert not graph[protocol] & (backends | {f"{EXECUTION}.factory", EXECUTION}), graph[protocol]
    for backend in backends:
        assert protocol in graph[backend] and f"{EXECUTION}.factory" not in graph[backend], (backend, graph[backend])
    assert backends - {f"{EXECUTION}.caching"} <= graph[f"{EXECUTION}.factory"]
    # nothing inside the package leans on its own __init__ (which imports every backend)
    assert [m for m, deps in graph.items() if EXECUTION in deps] == []


def test_the_old_client_cycle_would_be_caught() -> None:
    graph = import_graph(EXECUTION)
    graph[f"{EXECUTION}.executor"] = graph[f"{EXECUTION}.executor"] | {f"{EXECUTION}.sandboxfusion"}
    assert find_cycle(graph) is not None


def test_every_maxk_jax_module_imports_in_a_fresh_interpreter() -> None:
    names = module_names()
    assert EXECUTION in names and f"{EXECUTION}.factory" in names and len(names) > 20
    code = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\nprint('ok')"
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", code, *names], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def test_public_api() -> None:
    assert sorted(execution.__all__) == sorted(set(execution.__all__))
    for name in execution.__all__:
        assert getattr(execution, name) is not None, name
    for cls in ("EmbeddedExecutor", "HttpExecutor", "SandboxFusionExecutor", "CachingExecutor"):
        assert issubclass(getattr(execution, cls), execution.Executor), cls
