"""The command-line rules every absl entry point under experiments/ shares (one owner):

* a user's mistake (a bad flag value, a missing or corrupt file, an unreachable judge, an invalid
  config) prints ONE line ``<program>: error: <what is wrong>`` on stderr and exits with status 2,
  no traceback and no help text: raise `UserError` (or `absl.app.UsageError`), or run the
  checks inside ``with user_errors():`` which turns their ValueError / OSError into `UserError`;
* ``--help`` / ``--helpshort`` / ``--helpfull`` exit 0;
* Ctrl-C (KeyboardInterrupt) prints ONE line ``<program>: interrupted: <what was saved>`` and exits
  with status 130; a main says what it saved (and how to continue) with `on_interrupt`;
* internal errors (anything else) keep their traceback;
* a quiet console: library log records (orbax, jax, transformers, ...) below ERROR and the
  program's own below WARNING are dropped unless ``--log_level=info`` (or debug) or absl's
  ``--verbosity`` / ``-v`` is given.

    from maxk_jax import cli

    def main(argv):
        with cli.user_errors():          # checks before work: one line per mistake
            cfg = check_everything()
        cli.on_interrupt(lambda: f"checkpoints in {cfg.out}; continue with --resume")   # Ctrl-C's line
        do_the_work(cfg)                 # errors here are bugs: tracebacks

    if __name__ == "__main__":
        cli.run_main(main)               # instead of absl.app.run(main)

Every entry point under experiments/ (and ``maxk_jax.execution.serve``) is written this way; one that
trains takes ``--method`` from `maxk_jax.rl.method.define_method_flag` (the registry's names).
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

from absl import app, flags
from absl import logging as absl_logging

LOG_LEVELS = ("debug", "info", "warning", "error")
_HELP_FLAGS = ("--help", "-help", "-h", "-?", "--helpshort", "-helpshort", "--helpfull", "-helpfull",
               "--helpxml", "-helpxml")
# Libraries (logger name roots and package directories) whose records are hidden below ERROR on a quiet
# console (absl is not one: programs log through its "absl" logger too).
_LIBRARIES = ("orbax", "jax", "jaxlib", "flax", "matplotlib", "httpx", "httpcore", "urllib3", "etils",
              "transformers", "tokenizers", "datasets", "huggingface_hub", "PIL", "fsspec", "tensorstore")
_LIBRARY_PATHS = tuple(f"{os.sep}{name}{os.sep}" for name in _LIBRARIES)
_OWN_HANDLERS = ("transformers", "datasets")


class UserError(Exception):
    """A user's mistake (bad flag, path, file content, judge address): `run_main` prints its
    message as one line on stderr and exits with status 2. The message must name the offending
    value and say what is wrong with it."""


def fail(message: str, *, status: int = 2) -> NoReturn:
    """Print ``<program>: error: <message>`` (one line) on stderr and exit with `status`."""
    line = " ".join(str(message).split())   # one line, whatever the message holds
    sys.stderr.write(f"{_program()}: error: {line}\n")
    sys.stderr.flush()
    sys.exit(status)


def _program() -> str:
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name:
        return spec.name.rsplit(".", 1)[-1]
    return os.path.splitext(os.path.basename(sys.argv[0] or "maxk_jax"))[0] or "maxk_jax"


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Inside the block (the checks before work), ValueError and OSError (FileNotFoundError,
    PermissionError, ...) are the user's mistakes: they become `UserError` with the same message
    (chained to the original)."""
    try:
        yield
    except UserError:
        raise
    except (ValueError, OSError) as err:
        raise UserError(_message(err)) from err


def _message(err: BaseException) -> str:
    text = str(err).strip()
    if isinstance(err, OSError) and err.filename is not None and err.strerror:
        text = f"{err.filename}: {err.strerror}"
    return text or type(err).__name__


def define_log_level_flag() -> None:
    """``--log_level`` (once per process): how much library / program logging reaches the console."""
    if "log_level" not in flags.FLAGS:
        flags.DEFINE_enum("log_level", None, list(LOG_LEVELS),
                          "Console log level (default: warnings of this program, errors of libraries such "
                          "as orbax and jax; 'info' shows every library's INFO lines). absl's --verbosity=1 "
                          "(-v 1) also shows everything.")


class _QuietFilter(logging.Filter):
    """Drops library records below ERROR and the program's own below WARNING."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            return True
        library = ((record.name or "").split(".")[0] in _LIBRARIES
                   or any(p in (record.pathname or "") for p in _LIBRARY_PATHS))
        return not library and record.levelno >= logging.WARNING


_QUIET = _QuietFilter()


def configure_logging(level: str | None = None, verbosity_given: bool = False) -> None:
    """Apply the console rule: `level` (one of LOG_LEVELS) for everything, or (None, no
    --verbosity) the quiet default of `_QuietFilter`."""
    handlers = [absl_logging.get_absl_handler(), *logging.root.handlers]
    for handler in handlers:
        handler.removeFilter(_QUIET)
    if verbosity_given:
        return
    chosen = "error" if level is None else level
    for name in _OWN_HANDLERS:   # libraries that print through their own handler (and set its level on import)
        if level is not None or f"{name.upper()}_VERBOSITY" not in os.environ:   # the user's setting stays
            os.environ[f"{name.upper()}_VERBOSITY"] = chosen
            logging.getLogger(name).setLevel(getattr(logging, chosen.upper()))
    if level is None:
        absl_logging.set_verbosity(absl_logging.INFO)   # records reach the filter, which decides
        for handler in handlers:
            handler.addFilter(_QUIET)
        return
    absl_logging.set_verbosity(level)
    logging.root.setLevel(getattr(logging, level.upper()))


_EXPLAINERS: list[Callable[[Exception, Sequence[str]], str | None]] = []


def register_flag_error_explainer(explain: Callable[[Exception, Sequence[str]], str | None]) -> None:
    """`parse_flags` asks ``explain(err, argv)`` for the message of an AttributeError / KeyError
    raised while parsing (`maxk_jax.cli.config_overrides` registers its diagnosis of unknown
    ``--config.<field>`` overrides)."""
    if explain not in _EXPLAINERS:
        _EXPLAINERS.append(explain)


def _help_requested(argv: Sequence[str]) -> bool:
    return any(a.split("=", 1)[0] in _HELP_FLAGS for a in argv[1:] if a != "--")


def parse_flags(argv: list[str]) -> list[str]:
    """absl ``flags_parser``: flag errors (unknown flag, bad value, missing required flag, unknown
    ``--config.<field>``) are one line, status 2; ``--help`` exits 0 after the help."""
    help_requested = _help_requested(argv)
    try:
        rest = flags.FLAGS(argv)
    except SystemExit as exit_:
        if help_requested:
            sys.exit(0)
        raise exit_
    except flags.Error as err:
        fail(_without_traceback(str(err)))
    except (AttributeError, KeyError) as err:   # ml_collections: an override of a missing field
        fail(next((m for m in (explain(err, argv) for explain in _EXPLAINERS) if m),
                  f"{type(err).__name__}: {err} (while parsing the flags)"))
    if help_requested:   # absl prints the help while parsing; in case it did not exit itself
        sys.exit(0)
    return rest


def _without_traceback(text: str) -> str:
    """ml_collections puts the config file's traceback into its flag error: keep its first words
    and the exception's last line."""
    marker = "Traceback (most recent call last):"
    if marker not in text:
        return text
    last = [line.strip() for line in text.splitlines() if line.strip()][-1]
    return f"{text.split(marker)[0].strip()} {last}"


NOTHING_RESUMABLE = "nothing resumable was saved (files written so far may be incomplete)"
_INTERRUPT_NOTE: list[Callable[[], str]] = []


def on_interrupt(saved: Callable[[], str] | str) -> None:
    """What Ctrl-C's one line says was saved (and how to continue): `saved`, or its result when
    called at the interrupt (so it can list the checkpoints written by then). Replaces the previous note."""
    _INTERRUPT_NOTE[:] = [saved if callable(saved) else (lambda: saved)]


def interrupted_message() -> str:
    """The interrupt line's text: the `on_interrupt` note (`NOTHING_RESUMABLE` when none was set or it failed)."""
    try:
        return _INTERRUPT_NOTE[0]() if _INTERRUPT_NOTE else NOTHING_RESUMABLE
    except Exception:   # noqa: BLE001 -- the note must not turn Ctrl-C into a traceback
        return NOTHING_RESUMABLE


def run_main(main: Callable[[list[str]], Any], argv: list[str] | None = None) -> None:
    """`absl.app.run(main)` with the rules of this module: `UserError` and `app.UsageError` from
    `main` are one line on stderr and exit status 2; flag errors likewise; ``--help`` exits 0;
    Ctrl-C is one line (what was saved: `on_interrupt`) and exit status 130."""
    define_log_level_flag()

    def wrapped(args: list[str]) -> Any:
        configure_logging(flags.FLAGS.log_level, verbosity_given=flags.FLAGS["verbosity"].present)
        try:
            return main(args)
        except (UserError, app.UsageError) as err:
            fail(str(err))

    try:
        app.run(wrapped, argv=argv, flags_parser=parse_flags)
    except KeyboardInterrupt:
        sys.stdout.flush()
        line = " ".join(f"interrupted: {interrupted_message()}".split())
        start = "\n" if sys.stderr.isatty() else ""   # a terminal: end a progress bar's partial line
        sys.stderr.write(f"{start}{_program()}: {line}\n")
        sys.stderr.flush()
        sys.exit(130)


def parse_seeds(values: Sequence[str]) -> list[int]:
    """Seeds from the flag list: distinct ints >= 0 (ValueError naming the bad entry)."""
    seeds = []
    for v in values:
        try:
            s = int(v)
        except (TypeError, ValueError):
            raise ValueError(f"--seeds entry {v!r} is not an int") from None
        if s < 0:
            raise ValueError(f"--seeds entry {s} must be >= 0")
        seeds.append(s)
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds must be a non-empty list of distinct ints, got {list(values)}")
    return seeds
