"""Fields of the typed configs (the run config, the pipeline config, the step config): validators
shared by all of them, each raising ValueError naming the dotted field and the offending value
(e.g. ``rollout.prompts=0 must be an int >= 1``), and `replace_fields`, a copy with dotted-path
fields replaced. A leaf module: it imports nothing from the package."""
from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Iterable, Mapping
from typing import Any

Options = tuple[tuple[str, Any], ...]


def is_int(x: Any) -> bool:
    """An integral value that is not a bool."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def check_int(value: Any, name: str, minimum: int = 1) -> None:
    """``name=value`` must be an int >= ``minimum``."""
    if not is_int(value) or value < minimum:
        raise ValueError(f"{name}={value!r} must be an int >= {minimum}")


def check_real(value: Any, name: str, text: str, ok: bool) -> None:
    """``name=value`` must be a finite real number for which ``ok`` holds (``text`` says what is required)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or not ok:
        raise ValueError(f"{name}={value!r} must be {text}")


def check_choice(value: Any, name: str, choices: tuple[str, ...]) -> None:
    """``name=value`` must be one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not one of {choices}")


def check_type(value: Any, name: str, kind: type) -> None:
    """``name=value`` must be an instance of ``kind``."""
    if not isinstance(value, kind):
        raise ValueError(f"{name}={value!r} must be a {kind.__name__}")


def int_tuple(obj: Any, field: str, name: str, minimum: int) -> None:
    """Normalise ``obj.field`` (any sequence) to a tuple of ints >= minimum, in place."""
    value = getattr(obj, field)
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise ValueError(f"{name}={value!r} must be a tuple of ints, e.g. (1, 2)")
    value = tuple(value)
    if not all(is_int(x) and x >= minimum for x in value):
        raise ValueError(f"{name}={value!r} must be a tuple of ints >= {minimum}")
    object.__setattr__(obj, field, tuple(int(x) for x in value))


def option_pairs(value: Any, name: str, example: str) -> Options:
    """`value` (name/value pairs or a mapping) as sorted (name, value) pairs; ValueError naming
    `name` and the value when it is not pairs or names an option twice."""
    options = tuple(value.items()) if isinstance(value, Mapping) else value
    if isinstance(options, (str, bytes)) or not hasattr(options, "__iter__") or not all(
            isinstance(p, (tuple, list)) and len(p) == 2 and isinstance(p[0], str) for p in options):
        raise ValueError(f"{name}={value!r} must be (name, value) pairs, e.g. {example}")
    options = tuple(sorted(((str(k), v) for k, v in options), key=lambda p: p[0]))
    if len({k for k, _ in options}) != len(options):
        raise ValueError(f"{name}={options!r} names an option twice")
    return options


def on_path(err: ValueError, path: str, names: Iterable[str]) -> ValueError:
    """`err` of a composed type that names its own fields bare (``n=0 must ...``) as the error of
    the config field at `path` (``rollout.sampler.n=0 must ...``); other messages unchanged."""
    message = str(err)
    if any(message.startswith((f"{name}=", f"{name} ", f"{name}.")) for name in names):
        return ValueError(f"{path}.{message}")
    return err


def replace_fields(obj: Any, changes: Mapping[str, Any]) -> Any:
    """Copy of the dataclass tree `obj` (e.g. a RunConfig) with dotted-path fields replaced, e.g.
    ``{"rollout.sampler.n": 4, "algo.k": 2}``; every changed dataclass is validated again.
    ValueError naming a path that is not a field."""
    direct: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    names = [f.name for f in dataclasses.fields(obj)]
    for path, value in changes.items():
        head, _, rest = path.partition(".")
        if head not in names:
            raise ValueError(f"{type(obj).__name__} has no field {head!r} (in {path!r}); valid fields: "
                             f"{', '.join(names)}")
        if rest:
            nested.setdefault(head, {})[rest] = value
        else:
            direct[head] = value
    for head, sub in nested.items():
        inner = direct.get(head, getattr(obj, head))
        try:
            direct[head] = replace_fields(inner, sub)
        except ValueError as err:
            raise on_path(err, head, [f.name for f in dataclasses.fields(inner)]) from err
    return dataclasses.replace(obj, **direct)
