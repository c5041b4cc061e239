"""The package's shape: imports follow the data flow (problems -> sampler -> executor -> judging ->
estimator -> loss -> train_step -> loop), no import cycles between modules, and no script under
experiments/ imports another script (configs aside)."""
from __future__ import annotations

import ast
import collections
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Stage of each unit (a top-level module / subpackage of maxk_jax; rl's modules one by one).
# A unit may import only units of the same or an earlier stage.
STAGE = {
    "models": 0, "data": 0, "runtime": 0, "cli": 0,
    "sampling": 1,
    "execution": 2,
    "estimators": 4,
    "eval": 5, "export": 5, "rl.losses": 5, "rl.logprobs": 5, "rl.staleness": 5, "rl.step_metrics": 5,
    "rl.wiring": 5,
    "rl.training": 6, "rl.exactness": 6,
    "rl.rollout": 7, "rl.warmup": 7, "rl.metrics_log": 7, "rl.run_sections": 7, "rl.problem_stream": 7, "rl.run_config": 7, "rl.config_dict": 7,
    "rl.loop": 7, "rl.producer": 7, "rl.method": 7, "rl.bench": 7, "planning": 7,
    "pipelines": 8, "benchmarks": 8,
}


def _modules(package: str) -> dict[str, pathlib.Path]:
    out = {}
    for path in (ROOT / package).rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(path: pathlib.Path, modules: dict[str, pathlib.Path], prefix: str) -> set[str]:
    """Modules of `modules` that `path` imports (anywhere in the file, function-level included)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == prefix:
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                out.add(name if name in modules else node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == prefix)
    return {m for m in out if m in modules}


def _unit(module: str) -> str:
    parts = module.split(".")
    if len(parts) >= 3 and parts[1] == "rl":
        return "rl." + parts[2]
    return parts[1] if len(parts) > 1 else parts[0]


def test_every_unit_has_a_stage():
    units = {_unit(m) for m in _modules("maxk_jax")} - {"maxk_jax", "rl"}
    assert units <= set(STAGE), sorted(units - set(STAGE))


def test_imports_follow_the_data_flow():
    modules = _modules("maxk_jax")
    bad = []
    for module, path in modules.items():
        src = _unit(module)
        for target in _imports(path, modules, "maxk_jax"):
            dst = _unit(target)
            if src in STAGE and dst in STAGE and STAGE[dst] > STAGE[src]:
                bad.append(f"{module} imports {target} (stage {STAGE[src]} -> {STAGE[dst]})")
    assert not bad, "\n".join(bad)


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of a directed graph as a node list (first == last), or [] when it is acyclic."""
    state: dict[str, int] = collections.defaultdict(int)   # 0 new, 1 on the stack, 2 done

    def visit(node: str, stack: list[str]) -> list[str]:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state[nxt] == 1:
                return stack[stack.index(nxt):] + [node, nxt] if nxt in stack else [node, nxt]
            if state[nxt] == 0:
                found = visit(nxt, stack + [node])
                if found:
                    return found
        state[node] = 2
        return []

    for node in sorted(graph):
        if state[node] == 0:
            found = visit(node, [])
            if found:
                return found
    return []


def test_no_import_cycles_between_modules():
    modules = _modules("maxk_jax")
    graph = {m: _imports(p, modules, "maxk_jax") - {m} for m, p in modules.items()}
    # a package's __init__ re-exports its private modules; those edges are not cycles of logic
    graph = {m: {t for t in ts if not m.startswith(t + ".")} for m, ts in graph.items()}
    assert find_cycle(graph) == [], " -> ".join(find_cycle(graph))


def test_find_cycle_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def _is_script(path: pathlib.Path) -> bool:
    """An entry point: a module with an ``if __name__ == "__main__":`` block."""
    return any(isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
               and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__"
               for node in ast.parse(path.read_text()).body)


def test_scripts_do_not_import_scripts():
    """No module under experiments/ imports another module of experiments/ but the run configs:
    shared benchmark code lives in maxk_jax.benchmarks, shared library code in maxk_jax."""
    modules = _modules("experiments")
    bad = [f"{module} imports {target}"
           for module, path in sorted(modules.items())
           for target in sorted(_imports(path, modules, "experiments"))
           if target != module and not target.startswith("experiments.configs")]
    assert not bad, "\n".join(bad)


def _entry_point_files() -> list[pathlib.Path]:
    """Every experiments/ module but the package marker and the run configs."""
    return sorted(p for p in (ROOT / "experiments").rglob("*.py")
                  if p.name != "__init__.py" and "configs" not in p.relative_to(ROOT / "experiments").parts)


def test_every_experiments_module_is_an_entry_point_with_a_main():
    """Entry points are only entry points: each experiments/*.py (configs aside) defines ``main`` and
    runs it under ``if __name__ == "__main__":``; code without a main belongs in the package."""
    files = _entry_point_files()
    assert {p.stem for p in files} >= {"bench_accelerator", "plan_train", "bandit", "evaluate"}
    bad = [str(p.relative_to(ROOT)) for p in files
           if not _is_script(p) or not any(isinstance(node, ast.FunctionDef) and node.name == "main"
                                           for node in ast.parse(p.read_text()).body)]
    assert not bad, f"without a main (move shared code into maxk_jax): {bad}"


def test_contracts_are_cited_inside_the_repository():
    """Docstrings, README.md and docs/ cite docs/contracts.md (in the repository), never a design note outside it."""
    assert (ROOT / "docs" / "contracts.md").exists()
    outside = "DESIGN" + ".md"
    cited = [str(p.relative_to(ROOT)) for folder in ("maxk_jax", "experiments", "tests") for p in (ROOT / folder).rglob("*.py")
             if outside in p.read_text()]
    cited += [str(p.relative_to(ROOT)) for p in (ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")))
              if outside in p.read_text()]
    assert not cited, cited


def test_no_private_name_crosses_a_module_boundary():
    """No module of the package imports a private (_name) from another, nor reads one off an
    imported package module (``module._name``); private modules of a subpackage (``_sampler``)
    are imported by their own package's __init__ only."""
    modules = _modules("maxk_jax")
    bad = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text())
        aliases = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "maxk_jax":
                for alias in node.names:
                    target = f"{node.module}.{alias.name}"
                    if target in modules:
                        aliases.add(alias.asname or alias.name)
                    own_init = path.name == "__init__.py" and node.module == module
                    if alias.name.startswith("_") and not own_init:
                        bad.append(f"{module}: from {node.module} import {alias.name}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "maxk_jax" and alias.asname:
                        aliases.add(alias.asname)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                bad.append(f"{module}: {node.value.id}.{node.attr}")
    assert not bad, bad
