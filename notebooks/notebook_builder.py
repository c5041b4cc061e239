"""Shared pieces of the notebook generators (build_*.py): cell collection, the Colab install cell, writing.

Each generator creates a `NotebookBuilder`, adds cells with `md` / `code` (or `colab_install`), and calls
`write(name)`; the notebook is written next to this file with no outputs (the test suite executes it).
"""
from __future__ import annotations

import configparser
import pathlib
from collections.abc import Sequence

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook


def jax_range() -> str:
    """The jax version range of setup.cfg's install_requires (e.g. ">=0.10.2,<0.13"): what the install cell
    keeps the runtime's jax to."""
    cfg = configparser.ConfigParser()
    cfg.read(pathlib.Path(__file__).resolve().parent.parent / "setup.cfg")
    for line in cfg["options"]["install_requires"].split("\n"):
        name, _, spec = line.strip().partition(">")
        if name == "jax":
            return ">" + spec
    raise ValueError("setup.cfg's install_requires names no jax range")


_INSTALL = r'''
# Install maxk-jax in Colab only; locally import the checkout in place (no installation).
import importlib.util, os, pathlib, subprocess, sys

if importlib.util.find_spec("maxk_jax") is None:
    here = pathlib.Path.cwd()
    root = next((p for p in (here, *here.parents)
                 if (p / "setup.cfg").exists() and (p / "maxk_jax").is_dir()), None)
    if "google.colab" in sys.modules:
        source = os.environ.get("MAXK_JAX_SOURCE") or (str(root) if root else None)
        if source is None:
            raise RuntimeError("Clone the maxk-jax repository and %cd into it first, or set "
                               "MAXK_JAX_SOURCE to a pip-installable source of the package.")
{apt}        # Keep the runtime's accelerator jax: pin jax, jaxlib and their CUDA / TPU plugins to the
        # installed versions for this install (setup.cfg's range: jax{jax_range}).
        from importlib import metadata
        keep = sorted({f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions()
                       if (d.metadata["Name"] or "").lower().replace("_", "-").startswith(("jax", "libtpu"))})
        pathlib.Path("/tmp/maxk_jax_keep.txt").write_text("\n".join(keep) + "\n")
        print("keeping the runtime's", ", ".join(keep) or "(no jax installed)")
        try:
            subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", source,
                                   "-c", "/tmp/maxk_jax_keep.txt"])
        except subprocess.CalledProcessError as err:
            raise RuntimeError("maxk-jax needs jax {jax_range} and this runtime has " + ", ".join(keep)
                               + ": upgrade it deliberately (pip install -U 'jax[cuda12]{jax_range}' on a GPU, "
                               "'jax[tpu]{jax_range}' on a TPU), restart the runtime and run this cell again") from err
    elif root is not None:
        sys.path.insert(0, str(root))
    else:
        raise ModuleNotFoundError("maxk_jax is not importable: run ./setup.sh in the repository")
'''


class NotebookBuilder:
    """Collects cells in order and writes them as an output-free .ipynb."""

    def __init__(self) -> None:
        self.cells: list = []

    def md(self, text: str) -> None:
        """Append a markdown cell (surrounding whitespace stripped)."""
        self.cells.append(new_markdown_cell(text.strip()))

    def code(self, text: str) -> None:
        """Append a code cell (surrounding whitespace stripped)."""
        self.cells.append(new_code_cell(text.strip()))

    def colab_install(self, apt_packages: Sequence[str] = ()) -> None:
        """Append the cell that pip-installs the checkout in Colab (plus `apt_packages` there) and
        otherwise puts the repository root on sys.path when maxk_jax is not importable."""
        if isinstance(apt_packages, str):
            raise ValueError(f"apt_packages={apt_packages!r} must be a sequence of package names, not a string")
        apt = ""
        if apt_packages:
            args = ", ".join(repr(p) for p in ("apt-get", "install", "-y", "-q", *apt_packages))
            apt = ("        subprocess.check_call(['apt-get', 'update', '-q'])\n"
                   f"        subprocess.check_call([{args}])\n")
        self.code(_INSTALL.replace("{apt}", apt).replace("{jax_range}", jax_range()))

    def notebook(self) -> nbformat.NotebookNode:
        """The validated notebook of the cells so far (stable ids ``cell-NN``, Colab metadata, no outputs)."""
        for i, cell in enumerate(self.cells):
            cell["id"] = f"cell-{i:02d}"    # stable ids: regenerating gives a byte-identical file
        nb = new_notebook(cells=self.cells)
        nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
        nb.metadata["language_info"] = {"name": "python"}
        nb.metadata["colab"] = {"provenance": []}
        nbformat.validate(nb)
        return nb

    def write(self, filename: str) -> pathlib.Path:
        """Write `notebook()` as notebooks/<filename>; returns its path."""
        path = pathlib.Path(__file__).with_name(filename)
        nbformat.write(self.notebook(), path)
        print(f"wrote {path} ({len(self.cells)} cells)")
        return path
