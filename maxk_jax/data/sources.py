"""Read upstream rows with `datasets` from a Hugging Face hub name OR a local path.

Local paths may be:
  * one file: ``.parquet``, ``.jsonl``/``.json`` (optionally ``.gz``), ``.arrow``;
  * a directory written by ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``;
  * a directory of data files (e.g. a downloaded hub snapshot such as
    ``data/train-00000-of-00039.parquet`` or ``test.jsonl, test2.jsonl, ...``): the files whose
    name starts with the split name (``train``, ``train-0001...``, ``test2.jsonl``) are read.

Anything else is a hub name, read with ``datasets.load_dataset(name, config, split=split)``
(needs network or a populated HF cache) -- unless it can only be a local path (absolute, starts
with ``.``/``~``, ends in a data-file suffix or ``/``, or its first directory exists here): then
FileNotFoundError says the path does not exist. A data file that cannot be read raises
ValueError naming it (a corrupt or truncated ``.gz``; invalid JSON with the file and line).
"""
from __future__ import annotations

import gzip
import json
import os
import re
import zlib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tqdm

if TYPE_CHECKING:   # imported when rows are read: the model, sampler and benchmarks run without it
    import datasets

_BUILDER_BY_SUFFIX = {
    ".parquet": "parquet",
    ".jsonl": "json", ".json": "json", ".jsonl.gz": "json", ".json.gz": "json",
    ".arrow": "arrow",
}


def hf_datasets() -> Any:
    """The ``datasets`` module, imported on first use (reading upstream rows needs it; the model,
    the sampler and the benchmarks do not). ImportError saying what to install when it is missing."""
    try:
        import datasets as module
    except ImportError as e:
        raise ImportError("reading dataset rows needs the `datasets` package (pip install datasets, or "
                          "pip install -e . for the tested version)") from e
    return module


def _suffix(path: Path) -> str | None:
    name = path.name.lower()
    for suf in sorted(_BUILDER_BY_SUFFIX, key=len, reverse=True):
        if name.endswith(suf):
            return suf
    return None


def _stem(path: Path) -> str:
    suf = _suffix(path) or ""
    return path.name[: len(path.name) - len(suf)]


def is_local(source: str | os.PathLike) -> bool:
    """True when `source` names an existing file or directory."""
    return os.path.exists(os.fspath(source))


def split_files(directory: str | os.PathLike, split: str) -> list[Path]:
    """Data files under `directory` (recursive, sorted) whose name starts with `split`.

    A name matches when it equals the split or continues with a digit, ``-``, ``_`` or ``.``
    (``test.jsonl``, ``test2.jsonl``, ``train-00001-of-00039.parquet``).
    """
    pattern = re.compile(rf"^{re.escape(split)}([0-9_.\-].*)?$")
    files = [p for p in sorted(Path(directory).rglob("*")) if p.is_file() and _suffix(p)]
    return [p for p in files if pattern.match(_stem(p))]


def _load_files(files: Sequence[Path], columns: Sequence[str] | None) -> datasets.Dataset:
    builders = {_BUILDER_BY_SUFFIX[_suffix(f)] for f in files}
    if len(builders) != 1:
        raise ValueError(f"data files mix formats {sorted(builders)}: {[str(f) for f in files]}")
    builder = builders.pop()
    kwargs: dict[str, Any] = {}
    if columns is not None and builder == "parquet":
        kwargs["columns"] = list(columns)
    hub = hf_datasets()
    try:
        return hub.load_dataset(builder, data_files=[str(f) for f in files], split="train", **kwargs)
    except Exception as e:  # datasets/pyarrow/pandas messages name neither the file nor the line
        if builder == "json":
            for f in files:
                check_json_file(f)
        raise ValueError(f"could not read {builder} data file(s) {[str(f) for f in files][:10]}: "
                         f"{type(e).__name__}: {e}") from e


def _open_json_text(path: str):
    return gzip.open(path, "rt", encoding="utf-8") if path.endswith(".gz") else open(path, encoding="utf-8")


def check_json_file(path: str | os.PathLike) -> None:
    """Raise ValueError naming `path` (and the line) when it is not readable JSON / JSON lines.

    ``.gz`` files are decompressed (a corrupt or truncated gzip stream is reported as such). A file
    whose first non-blank line is a complete JSON value is JSON lines (streamed, each line
    checked); any other file must be one JSON document.
    """
    path = os.fspath(path)
    lineno = 0
    try:
        with _open_json_text(path) as f:
            first = ""
            for lineno, first in enumerate(f, 1):
                if first.strip():
                    break
            if not first.strip():
                return
            try:
                json.loads(first)
            except json.JSONDecodeError:
                document = first + f.read()   # not JSON lines: one document
                start = lineno - 1
            else:
                for lineno, line in enumerate(f, lineno + 1):
                    if line.strip():
                        try:
                            json.loads(line.rstrip("\r\n"))
                        except json.JSONDecodeError as e:
                            raise ValueError(f"{path}:{lineno}: invalid JSON (JSON lines file): {e.msg} at "
                                             f"column {e.colno}") from e
                return
    except (EOFError, zlib.error, gzip.BadGzipFile, UnicodeDecodeError) as e:
        kind = "gzip file (corrupt or truncated?)" if path.endswith(".gz") else "UTF-8 text file"
        where = f" (after line {lineno})" if lineno else ""
        raise ValueError(f"{path}: not a readable {kind}{where}: {type(e).__name__}: {e}") from e
    try:
        json.loads(document)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{start + e.lineno}: invalid JSON: {e.msg} at column {e.colno}") from e


def looks_local(source: str) -> bool:
    """True when `source` can only be meant as a local path, never a hub name ``owner/name``:
    absolute, starting with ``.`` or ``~``, ending in ``/`` or a data-file suffix, or whose first
    path component is an existing directory."""
    if os.path.isabs(source) or source.startswith((".", "~")) or source.endswith(("/", os.sep)):
        return True
    if _suffix(Path(source)) is not None:
        return True
    head = source.replace(os.sep, "/").split("/", 1)
    return len(head) == 2 and os.path.isdir(head[0])


def read_rows(source: str | os.PathLike, *, split: str, config: str | None = None,
              columns: Sequence[str] | None = None,
              select_files: Callable[[list[Path]], list[Path]] | None = None) -> datasets.Dataset:
    """Open upstream rows as a `datasets.Dataset` (iterate it for dict rows).

    Args:
      source: hub dataset name or local path (see module docstring).
      split: upstream split name (``train``/``valid``/``test``...). Ignored for a single file.
      config: hub configuration name (e.g. ``release_v6``); unused for local paths.
      columns: only read these columns (parquet files only; others read every column).
      select_files: for a directory of data files, narrows the split's file list (used to pick
        LiveCodeBench release files).
    Raises:
      FileNotFoundError: `source` is a local path (see `looks_local`) that does not exist.
      ValueError: a local directory with no readable files for `split`, mixed formats, a
        saved DatasetDict without `split`, or a data file that cannot be read (names the file,
        and the line for invalid JSON).
    """
    source = os.path.expanduser(os.fspath(source))
    if not is_local(source):
        if looks_local(source):
            raise FileNotFoundError(f"dataset path {source!r} does not exist (no such file or directory)")
        try:
            return hf_datasets().load_dataset(source, config, split=split)
        except Exception as e:  # network/cache failures: re-raise with the offline hint
            raise RuntimeError(f"{source!r} is not a local file or directory, and loading it as a hub dataset "
                               f"(config={config!r}, split={split!r}) failed: {e}. Offline? Pass a local path "
                               "(parquet/jsonl file or directory).") from e
    path = Path(source)
    if path.is_file():
        if _suffix(path) is None:
            raise ValueError(f"unsupported data file {source!r}: expected one of {sorted(_BUILDER_BY_SUFFIX)}")
        return _load_files([path], columns)
    if (path / "dataset_dict.json").exists():
        dd = hf_datasets().load_from_disk(source)
        if split not in dd:
            raise ValueError(f"split {split!r} not in saved DatasetDict {source!r}; available: {sorted(dd)}")
        return dd[split]
    if (path / "state.json").exists():
        return hf_datasets().load_from_disk(source)
    files = split_files(path, split)
    if select_files is not None:
        files = select_files(files)
    if not files:
        present = [str(p.relative_to(path)) for p in sorted(path.rglob("*")) if p.is_file() and _suffix(p)]
        raise ValueError(f"no data files for split {split!r} under {source!r} (data files present: "
                         f"{present[:10]}); pass a file path instead")
    return _load_files(files, columns)


def progress(rows: Iterable[Any], desc: str) -> Iterable[Any]:
    """Wrap `rows` in a tqdm progress bar (shown only on a terminal / for long datasets)."""
    total = len(rows) if hasattr(rows, "__len__") else None
    return tqdm.tqdm(rows, desc=desc, total=total, leave=False, mininterval=1.0,
                     disable=total is not None and total < 2000)
