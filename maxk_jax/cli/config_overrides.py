"""Clear errors for ``--config.<field>=<value>`` overrides of ml_collections config flags.

ml_collections rejects an override of a field the config does not have with a bare
``AttributeError: "'bogus'"`` traceback -- raised while absl parses the flags (or, when
``--config`` itself is not given, already when the flag is defined at import). The CLIs define
their config flag inside `explained_errors` and run through `maxk_jax.cli.run_main`, so the message
names the override, the config section it was looked up in, and the valid fields there::

    from maxk_jax.cli import config_overrides
    with config_overrides.explained_errors("config", default="experiments/configs/base.py:grpo"):
        config_flags.DEFINE_config_file("config", "experiments/configs/base.py:grpo", "...", lock_config=True)
    ...
    cli.run_main(main)

    $ python -m experiments.train --config.algo.bogus=1
    train: error: --config.algo.bogus: config.algo has no field 'bogus'; valid fields: beta, ...
"""
from __future__ import annotations

import contextlib
import difflib
import importlib.util
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from maxk_jax import cli


_DEFAULTS: dict[str, str] = {}  # config flag name -> default config file, for the diagnosis


def unknown_field(config: Any, path: str, root: str = "config") -> str | None:
    """Why the dotted override `path` (e.g. ``"algo.k"``) names no field of `config`, else None.

    config: a ConfigDict (or any nested mapping). Returns e.g. ``"config.algo has no field 'bogus';
    valid fields: a, b (did you mean 'beta'?)"`` or ``"config.algo.k is not a config section (it
    holds 8), it has no field 'x'"``.
    """
    node, where = config, root
    for part in path.split("."):
        key = re.sub(r"\[[^\]]*\]$", "", part)   # ml_collections also accepts list indices: a.b[0]
        keys = _fields(node)
        if keys is None:
            return f"{where} is not a config section (it holds {node!r:.40}), it has no field {key!r}"
        if key not in keys:
            close = difflib.get_close_matches(key, keys, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            return f"{where} has no field {key!r}; valid fields: {', '.join(sorted(keys))}{hint}"
        node, where = node[key], f"{where}.{key}"
    return None


def _fields(node: Any) -> list[str] | None:
    if isinstance(node, Mapping) or hasattr(node, "keys") and hasattr(node, "__getitem__"):
        return [str(k) for k in node.keys()]
    return None


def _config_file(argv: Sequence[str], name: str, default: str) -> str:
    """The config file of flag `name` in `argv` (``--name=FILE`` or ``--name FILE``), else `default`."""
    path = default
    for i, arg in enumerate(argv):
        match = re.match(rf"^--?{re.escape(name)}(?:=(.*))?$", arg)
        if match:
            path = match.group(1) if match.group(1) is not None else (argv[i + 1] if i + 1 < len(argv) else path)
    return path


def override_paths(argv: Sequence[str], name: str = "config") -> list[str]:
    """The field paths overridden in `argv`: ``--config.a.b=1`` / ``--noconfig.c`` -> ``["a.b", "c"]``."""
    out = []
    for arg in argv:
        match = re.match(rf"^--?(?:no)?{re.escape(name)}\.([^=]+)", arg)
        if match:
            out.append(match.group(1))
    return out


def load_config_file(spec: str) -> Any:
    """``get_config(*args)`` of the config file ``"path.py"`` or ``"path.py:arg"`` (as ml_collections)."""
    path, *args = spec.split(":", 1)
    module_spec = importlib.util.spec_from_file_location("_maxk_config_to_check", path)
    if module_spec is None or module_spec.loader is None:
        raise FileNotFoundError(f"config file {path!r} cannot be loaded")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.get_config(*args)


def explain(argv: Sequence[str], name: str = "config", default: str | None = None) -> str | None:
    """The first ``--name.<path>`` override in `argv` that names no field of the config, as a
    message (see `unknown_field`), or None when every override names a field."""
    paths = override_paths(argv, name)
    file = _config_file(argv, name, default if default is not None else _DEFAULTS.get(name, ""))
    if not paths or not file:
        return None
    config = load_config_file(file)
    for path in paths:
        message = unknown_field(config, path, root=name)
        if message:
            return f"--{name}.{path}: {message}"
    return None


def explain_error(err: Exception, argv: Sequence[str]) -> str:
    """The message for `err` raised while parsing the ``--config`` overrides in `argv`: the
    diagnosis of `explain` when an override names no field, else the error itself."""
    for name in _DEFAULTS or {"config": ""}:
        try:
            message = explain(argv, name)
        except Exception:  # noqa: BLE001 - the diagnosis must not hide the original error
            message = None
        if message:
            return message
    return f"{type(err).__name__}: {err} (while parsing the --config overrides)"


@contextlib.contextmanager
def explained_errors(name: str = "config", default: str = "") -> Iterator[None]:
    """Wrap the caller's ``config_flags.DEFINE_config_file(name, default, ...)``: an unknown override
    exits with the message of `explain` (one line, status 2: `maxk_jax.cli.fail`).

    ml_collections parses the default config (with the command line's overrides) at definition
    when ``--name`` is not given. The DEFINE stays in the caller so absl attributes the flag to
    the CLI's module (``--helpshort`` lists it).
    """
    _DEFAULTS[name] = default
    cli.register_flag_error_explainer(explain_error)   # the same message when absl parses the flags
    try:
        yield
    except (AttributeError, KeyError) as err:
        cli.fail(explain_error(err, sys.argv))
