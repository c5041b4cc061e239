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
    # the repository's address is one marked setting, the cell's first line
    assert src.splitlines()[0].startswith('REPO_URL = "https://github.com/<owner>/maxk-jax"') and "set this" in src


def _run_install_cell(tmp_path, monkeypatch, cwd, env: dict[str, str], colab: bool):
    """Executes the apt variant of the install cell in `cwd` with subprocess.check_call recorded (nothing runs):
    returns (the recorded commands, the cell's namespace)."""
    import os
    import subprocess
    import types
    calls: list[list[str]] = []

    def check_call(cmd, **_):
        calls.append([str(c) for c in cmd])
        if cmd[:2] == ["git", "clone"]:      # the clone makes a checkout (only under tmp_path)
            assert pathlib.Path(cmd[-1]).resolve().is_relative_to(tmp_path.resolve()), cmd
            (pathlib.Path(cmd[-1]) / "maxk_jax").mkdir(parents=True)
            (pathlib.Path(cmd[-1]) / "setup.cfg").write_text("")
        return 0

    monkeypatch.setattr(subprocess, "check_call", check_call)
    monkeypatch.chdir(cwd)
    monkeypatch.delenv("MAXK_INSTALL", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    if colab:
        monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    cell = NotebookBuilder()
    cell.colab_install(("bubblewrap",))
    scope: dict = {}
    try:
        exec(cell.cells[0].source, scope)
    finally:
        os.chdir(cwd)
    return calls, scope


def test_the_install_cell_always_installs_the_checkout_it_runs_in(tmp_path, monkeypatch):
    """In Colab, inside a checkout whose maxk_jax is importable from the current folder (the case that skipped the
    install before), the cell still pip-installs that checkout, and bubblewrap when root."""
    import os
    checkout = tmp_path / "maxk-jax"
    (checkout / "maxk_jax").mkdir(parents=True)
    (checkout / "setup.cfg").write_text("")
    calls, scope = _run_install_cell(tmp_path, monkeypatch, checkout / "maxk_jax", {}, colab=True)
    pip = [c for c in calls if c[1:4] == ["-m", "pip", "install"]]
    assert len(pip) == 1 and pip[0][4:7] == ["-q", "-e", str(checkout)], calls
    assert not any(c[:2] == ["git", "clone"] for c in calls), calls          # already inside a checkout
    assert any(c[:2] == ["apt-get", "install"] or "bubblewrap" in c for c in calls) == (os.geteuid() == 0), calls
    assert scope["REPO_ROOT"] == checkout and str(checkout) in sys.path


def test_the_install_cell_clones_repo_url_outside_a_checkout(tmp_path, monkeypatch):
    with pytest.raises(RuntimeError, match="set REPO_URL at the top of this cell"):
        _run_install_cell(tmp_path, monkeypatch, tmp_path, {}, colab=True)    # the placeholder is not cloned
    cell = NotebookBuilder()
    cell.colab_install()
    url = "https://example.org/me/maxk-jax"
    monkeypatch.setattr(NotebookBuilder, "code", lambda self, text: self.cells.append(
        __import__("nbformat").v4.new_code_cell(text.replace("https://github.com/<owner>/maxk-jax", url))))
    calls, scope = _run_install_cell(tmp_path, monkeypatch, tmp_path, {"MAXK_INSTALL": "1"}, colab=False)
    assert calls[0] == ["git", "clone", "--depth", "1", url, str(tmp_path / "maxk-jax")], calls
    assert [c for c in calls if "pip" in c][0][4:7] == ["-q", "-e", str(tmp_path / "maxk-jax")], calls
    assert scope["REPO_ROOT"] == tmp_path / "maxk-jax"


def test_the_install_cell_installs_nothing_outside_colab(tmp_path, monkeypatch):
    """Locally (./setup.sh's .venv, the test suite) the checkout is imported in place: no pip, no apt, no clone."""
    checkout = tmp_path / "maxk-jax"
    (checkout / "maxk_jax").mkdir(parents=True)
    (checkout / "setup.cfg").write_text("")
    calls, scope = _run_install_cell(tmp_path, monkeypatch, checkout, {}, colab=False)
    assert calls == [] and scope["REPO_ROOT"] == checkout and sys.path[0] == str(checkout)


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
    assert 'load_dataset("humaneval")' in source
    # offline it loads the stored testbed base (a model warmed up on the synthetic problems), not random weights
    assert '"docs" / "testbed" / "base_scalar4_t11_xeon"' in source and "build_tiny_checkpoint" not in source
    assert "docs/usage/tpu.md" in source     # the TPU runtime's page


def test_the_colab_notebook_trains_the_default_method():
    """Notebook 03's train step is the run configs' DEFAULT_METHOD: its estimator, options and loss form."""
    from experiments.configs.base import DEFAULT_METHOD, METHODS
    from maxk_jax.rl.method import loss_form
    method = METHODS[DEFAULT_METHOD]
    import ast
    cells = _generator("build_03_colab_gpu.py").NB.cells
    assert DEFAULT_METHOD == "maxk_offpolicy_exact_loo1_rms" and DEFAULT_METHOD in "\n".join(c.source for c in cells)
    calls = {ast.unparse(node.func): node for c in cells if c.cell_type == "code"
             for node in ast.walk(ast.parse(c.source)) if isinstance(node, ast.Call)}
    step = {kw.arg: kw.value for kw in calls["training.StepConfig"].keywords}
    assert ast.literal_eval(step["estimator"]) == method.estimator, method
    assert ast.literal_eval(step["estimator_options"]) == tuple(dict(method.options).items()), method
    (kind,) = [kw.value for kw in step["loss"].keywords if kw.arg == "kind"]
    assert ast.literal_eval(kind) == loss_form(method.estimator, method.loss_kind), method
