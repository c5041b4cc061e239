"""Executes every notebook in notebooks/ top to bottom with nbclient: 01 and 03 in the default run (CI),
02 (the tiny pipeline step by step, ~2 min, the heaviest test of all; its pieces are the main job's,
which tests/pipelines/test_tiny.py runs by default) with `-m slow`."""
import pathlib

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
SLOW = {"02_tiny_rl.ipynb"}
CELL_TIMEOUT_S = 120  # hang guard per cell (the notebooks themselves aim at < 60 s in total)


@pytest.mark.parametrize("path", [pytest.param(p, id=p.name, marks=[pytest.mark.slow] if p.name in SLOW else [])
                                  for p in NOTEBOOKS])
def test_notebook_executes(path: pathlib.Path, monkeypatch: pytest.MonkeyPatch):
    # offline: 03_colab_gpu builds a tiny model instead of downloading Qwen2.5-Coder (the kernel inherits it)
    monkeypatch.setenv("MAXK_OFFLINE", "1")
    nb = nbformat.read(path, as_version=4)
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), (
        f"{path.name} is committed with outputs; clear them before committing")
    # Run from the repository root so `import maxk_jax` resolves to this checkout.
    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT)}})
    client.execute()  # raises CellExecutionError naming the failing cell and its traceback


def test_the_slow_notebooks_exist():
    assert SLOW <= {p.name for p in NOTEBOOKS}, f"{SLOW} names a notebook that notebooks/ lacks"
