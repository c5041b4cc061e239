"""The pipelines are library code: maxk_jax.pipelines imports nothing from experiments/, and the two
pipeline scripts import no other script (only experiments.configs and the library)."""
import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _imported(path: pathlib.Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.update([node.module] + [f"{node.module}.{alias.name}" for alias in node.names])
    return names


def test_pipelines_import_nothing_from_experiments():
    files = sorted((ROOT / "maxk_jax" / "pipelines").glob("*.py"))
    assert len(files) >= 5
    for path in files:
        bad = {n for n in _imported(path) if n == "experiments" or n.startswith("experiments.")}
        assert not bad, (path.name, bad)


def test_pipeline_scripts_import_no_other_script():
    for script in ("tiny_pipeline.py", "compare_methods.py"):
        names = _imported(ROOT / "experiments" / script)
        bad = {n for n in names if (n == "experiments" or n.startswith("experiments."))
               and not n.startswith("experiments.configs")}
        assert not bad, (script, bad)
