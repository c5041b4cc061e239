"""notebooks/notebook_builder.py: the committed notebooks are exactly what their generators build, and
the Colab install cell."""
import configparser
import importlib.util
import pathlib
import sys

import nbformat
import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

NOTEBOOKS = pathlib.Path(__file__).resolve().parents[2] / "notebooks"
sys.path.insert(0, str(NOTEBOOKS))
import notebook_builder  # noqa: E402
from notebook_builder import NotebookBuilder  # noqa: E402


def _generator(name: str):
    spec = importlib.util.spec_from_file_location(f"_gen_{name}", NOTEBOOKS / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)    # collects the cells; main() (the file write) is not called
    return module


@pytest.mark.parametrize("generator,notebook", [("build_01_estimators.py", "01_estimators.ipynb"),
                                                ("build_02_tiny_rl.py", "02_tiny_rl.ipynb"),
                                                ("build_03_colab_gpu.py", "03_colab_gpu.ipynb")])
def test_committed_notebook_is_the_generators_output(generator, notebook):
    built = nbformat.writes(_generator(generator).NB.notebook()) + "\n"
    assert built == (NOTEBOOKS / notebook).read_text(encoding="utf-8"), (
        f"{notebook} differs from its generator: run .venv/bin/python notebooks/{generator}")


def test_cells_get_stable_ids_and_no_outputs():
    nb = NotebookBuilder()
    nb.md("  # title  ")
    nb.code("x = 1\n")
    node = nb.notebook()
    assert [c["id"] for c in node.cells] == ["cell-00", "cell-01"]
    assert node.cells[0].source == "# title" and node.cells[1].outputs == []
    assert node.metadata["kernelspec"]["name"] == "python3"


def test_colab_install_cell():
    plain, apt = NotebookBuilder(), NotebookBuilder()
    plain.colab_install()
    apt.colab_install(("bubblewrap",))
    assert "apt-get" not in plain.cells[0].source and "pip" in plain.cells[0].source
    src = apt.cells[0].source
    assert "['apt-get', 'update', '-q']" in src and "'install', '-y', '-q', 'bubblewrap'" in src
    compile(src, "cell", "exec")     # the cell is valid Python
    # the runtime's jax (and its CUDA / TPU plugins) is pinned for the install, never replaced
    assert '"-c", "/tmp/maxk_jax_keep.txt"' in src and 'startswith(("jax", "libtpu"))' in src
    # its message names setup.cfg's jax range (read there, not written out by hand)
    cfg = configparser.ConfigParser()
    cfg.read(NOTEBOOKS.parent / "setup.cfg")
    (jax_req,) = [r for r in map(Requirement, cfg["options"]["install_requires"].split("\n")[1:]) if r.name == "jax"]
    jax_range = notebook_builder.jax_range()
    assert SpecifierSet(jax_range) == jax_req.specifier
    assert f"maxk-jax needs jax {jax_range} and" in src and f"'jax[tpu]{jax_range}'" in src
    with pytest.raises(ValueError, match="apt_packages='bubblewrap'"):
        apt.colab_install("bubblewrap")


def test_the_colab_notebook_runs_online_unless_told_offline():
    """03_colab_gpu loads Qwen2.5-Coder from the hub by default; MAXK_OFFLINE=1 (the suite) switches to the tiny model."""
    cells = _generator("build_03_colab_gpu.py").NB.cells
    params = next(c.source for c in cells if c.cell_type == "code" and "OFFLINE =" in c.source)
    scope: dict = {}
    exec(params, scope)                          # the parameter cell alone (the environment as the suite leaves it)
    import os
    assert scope["OFFLINE"] == (os.environ.get("MAXK_OFFLINE", "0") == "1")
    assert scope["MODEL_ID"] == os.environ.get("MAXK_MODEL_ID", "Qwen/Qwen2.5-Coder-0.5B-Instruct")
    source = "\n".join(c.source for c in cells)
    assert "snapshot_download(MODEL_ID" in source and "convert.load_hf(model_dir" in source
    assert 'estimator="maxk_offpolicy"' in source and 'load_dataset("humaneval")' in source
