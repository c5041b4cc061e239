"""The run config as an ml_collections ConfigDict: the command line's form of `RunConfig`, one
conversion each way (the absl mains call `from_config_dict` once; config files build their
ConfigDict with `to_config_dict`, so the schema is the dataclasses' defaults, written once).

    cfg = to_config_dict(RunConfig())          # experiments/configs/base.py:get_config
    run = from_config_dict(FLAGS.config)       # experiments/train.py, after absl parsed overrides

The tree has one section per `RunConfig` section with the same field names, except that the
composed settings are flattened into their section (as the command line always had them):
``rollout.{n, max_new_tokens, temperature, top_k, top_p}`` and ``eval.{...}`` are the fields of
the section's ``sampler`` (``sampling.SamplerSettings``), ``algo.{eps_low, eps_high, kl_beta,
kl_estimator, aggregation, entropy_coef}`` those of ``algo.loss`` (``losses.LossConfig``), with
``algo.loss_kind`` = its ``kind`` ("auto" = the estimator's registry form) and ``algo.norm_length``
(None = rollout.max_new_tokens when aggregation is "seq_sum_norm").  Values keep their types:
tuples for ``eval.ks`` / ``rollout.eos_ids`` / ``algo.estimator_options`` (``(name, value)``
pairs), typed placeholders (None allowed) for optional fields (``data.chat``,
``model.logprob_chunk``, ``algo.norm_length``)::

    --config.eval.ks='(1,2,4)' --config.rollout.eos_ids='(151645,151643)' --config.data.chat=true
    --config.algo.estimator_options="(('baseline','loo1'),('clamp_delta',None))"
"""
from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any

from ml_collections import ConfigDict, FieldReference

from maxk_jax.rl import losses
from maxk_jax.rl.run_config import SECTION_TYPES, AlgoSettings, RunConfig, loss_form

_SCALARS = {"int": int, "float": float, "bool": bool, "str": str}
_RENAMED = {(losses.LossConfig, "kind"): "loss_kind"}   # flattened fields under another name


def _optional_type(field: dataclasses.Field) -> type | None:
    """T of a field annotated ``T | None`` or ``Optional[T]`` (T a scalar), else None."""
    text = str(field.type).replace(" ", "")
    if text.endswith("|None"):
        return _SCALARS.get(text[:-len("|None")])
    if text.startswith("Optional[") and text.endswith("]"):
        return _SCALARS.get(text[len("Optional["):-1])
    return None


def _leaf(field: dataclasses.Field, value: Any) -> Any:
    optional = _optional_type(field)
    if optional is not None:
        return FieldReference(value, field_type=optional)
    return value


def section_values(obj: Any) -> dict[str, Any]:
    """A typed section's fields as command-line values (tuples kept, nested sections flattened
    under their command-line names)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if f.metadata.get("flat"):
            for sub in dataclasses.fields(value):
                out[_RENAMED.get((type(value), sub.name), sub.name)] = _leaf(sub, getattr(value, sub.name))
        elif dataclasses.is_dataclass(value):
            out[f.name] = ConfigDict(section_values(value))
        else:
            out[f.name] = _leaf(f, value)
    return out


def _derived_norm_length(aggregation: str, max_new_tokens: int) -> int | None:
    return max_new_tokens if aggregation == "seq_sum_norm" else None


def to_config_dict(run: RunConfig) -> ConfigDict:
    """The ConfigDict of `run` (module docstring); ``from_config_dict`` of it gives `run` back."""
    tree = section_values(run)
    algo, loss = tree["algo"], run.algo.loss
    algo["loss_kind"] = "auto" if loss.kind == loss_form(run.algo.estimator) else loss.kind
    derived = _derived_norm_length(loss.aggregation, run.rollout.sampler.max_new_tokens)
    algo["norm_length"] = FieldReference(None if loss.norm_length == derived else loss.norm_length,
                                         field_type=int)
    return ConfigDict(tree)


def _tuples(value: Any) -> Any:
    """Lists (e.g. from JSON) -> tuples, recursively."""
    if isinstance(value, (list, tuple)):
        return tuple(_tuples(v) for v in value)
    return value


def _fields_text(cls: type) -> str:
    names = []
    for f in dataclasses.fields(cls):
        if f.metadata.get("flat"):
            sub_cls = typing.get_type_hints(cls)[f.name]
            names += [_RENAMED.get((sub_cls, s.name), s.name) for s in dataclasses.fields(sub_cls)]
        else:
            names.append(f.name)
    return ", ".join(sorted(names))


def build_section(cls: type, values: Mapping[str, Any], section: str,
                  context: Mapping[str, Any] | None = None, defaults: Any = None) -> Any:
    """An instance of the section class `cls` from its ConfigDict fields (missing = the field of
    `defaults`, an instance of `cls`; None = ``cls()``)."""
    values = dict(values)
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    flat: dict[str, tuple[type, dict[str, Any]]] = {}
    for f in dataclasses.fields(cls):
        if f.metadata.get("flat"):
            sub_cls = hints[f.name]
            sub = {s.name: _tuples(values.pop(_RENAMED.get((sub_cls, s.name), s.name)))
                   for s in dataclasses.fields(sub_cls) if _RENAMED.get((sub_cls, s.name), s.name) in values}
            flat[f.name] = (sub_cls, sub)
        elif f.name in values:
            kwargs[f.name] = _tuples(values.pop(f.name))
    if values:
        raise ValueError(f"{section} has no field(s) {sorted(values)}; valid fields: {_fields_text(cls)}")
    if defaults is None:
        defaults = cls()   # the section's defaults, e.g. the sampler and loss settings not overridden
    for name, (sub_cls, sub) in flat.items():
        if sub_cls is losses.LossConfig:
            sub = _resolve_loss(sub, kwargs.get("estimator", defaults.estimator), context or {})
        kwargs[name] = dataclasses.replace(getattr(defaults, name), **sub)
    return dataclasses.replace(defaults, **kwargs)


def _resolve_loss(sub: dict[str, Any], estimator: str, context: Mapping[str, Any]) -> dict[str, Any]:
    """loss_kind "auto" -> the registry's form; norm_length None -> rollout.max_new_tokens for
    "seq_sum_norm"."""
    sub = dict(sub)
    sub["kind"] = loss_form(estimator, sub.get("kind", "auto"))
    if sub.get("norm_length") is None:
        aggregation = sub.get("aggregation", AlgoSettings().loss.aggregation)
        sub["norm_length"] = _derived_norm_length(aggregation, context["max_new_tokens"])
    return sub


def from_config_dict(cfg: ConfigDict | Mapping[str, Any]) -> RunConfig:
    """The `RunConfig` of a run ConfigDict (or its ``to_dict()`` / JSON form); ValueError naming
    the field and value of any bad setting, or the fields a section does not have."""
    tree = dict(cfg.to_dict() if isinstance(cfg, ConfigDict) else cfg)
    kwargs: dict[str, Any] = {}
    order = [n for n in SECTION_TYPES if n != "algo"] + ["algo"]   # algo reads rollout's length
    for name in order:
        if name not in tree:
            continue
        section = tree.pop(name)
        if not isinstance(section, Mapping):
            raise ValueError(f"{name}={section!r} must be a config section")
        context = {"max_new_tokens": (kwargs["rollout"] if "rollout" in kwargs else
                                      SECTION_TYPES["rollout"]()).sampler.max_new_tokens}
        try:
            kwargs[name] = build_section(SECTION_TYPES[name], section, name, context)
        except (ValueError, TypeError) as err:
            message = str(err)
            raise ValueError(message if message.startswith(f"{name}") else f"{name}: {message}") from err
    check_top_level(tree, RunConfig, SECTION_TYPES, "the run config")
    return RunConfig(**kwargs, **tree)


def check_top_level(tree: Mapping[str, Any], cls: type, sections: Mapping[str, type], what: str) -> None:
    """ValueError naming every key of `tree` (the top-level scalars left after the sections were
    taken out) that is not a field of the config dataclass `cls`, and listing the valid ones."""
    top = {f.name for f in dataclasses.fields(cls)} - set(sections)
    unknown = sorted(set(tree) - top)
    if unknown:
        raise ValueError(f"{what} has no field(s) {unknown}; valid top-level fields: "
                         f"{', '.join(sorted(top | set(sections)))}")
