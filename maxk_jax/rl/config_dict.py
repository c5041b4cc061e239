"""The run config as an ml_collections ConfigDict: the command line's form of `RunConfig`, one
conversion each way (the absl mains call `from_config_dict` once; config files build their
ConfigDict with `to_config_dict`, so the schema is the dataclasses' defaults, written once).

    cfg = to_config_dict(RunConfig())          # experiments/configs/base.py:get_config
    run = from_config_dict(FLAGS.config)       # experiments/train.py, after absl parsed overrides

The tree has the typed config's shape and spelling: one section per `RunConfig` section, and a
composed setting is a sub-section under its field name -- ``rollout.sampler.{n, max_new_tokens,
temperature, top_k, top_p}`` (``sampling.SamplerSettings``), ``eval.sampler.{...}``,
``algo.loss.{kind, eps_low, eps_high, kl_beta, kl_estimator, aggregation, entropy_coef,
norm_length, ratio_level, kl_target}`` (``losses.LossConfig``) -- so ``--config.rollout.sampler.n=4`` is the field
``run.rollout.sampler.n``. Two values are resolved on the way in: ``algo.loss.kind`` "auto" = the
estimator's registry form, ``algo.loss.norm_length`` None = rollout.sampler.max_new_tokens when
aggregation is "seq_sum_norm". An old flattened spelling (``rollout.n``, ``algo.loss_kind``) is an
error that names the new path. Values keep their types: tuples for ``eval.ks`` /
``rollout.eos_ids`` / ``algo.estimator_options`` (``(name, value)`` pairs), typed placeholders
(None allowed) for optional fields (``data.chat``, ``model.logprob_chunk``,
``algo.loss.norm_length``)::

    --config.eval.ks='(1,2,4)' --config.rollout.eos_ids='(151645,151643)' --config.data.chat=true
    --config.algo.estimator_options="(('baseline','loo1'),('clamp_delta',None))"
"""
from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any

from ml_collections import ConfigDict, FieldReference

from maxk_jax.cli.fields import on_path
from maxk_jax.rl import losses
from maxk_jax.rl.run_config import SECTION_TYPES, AlgoSettings, RunConfig
from maxk_jax.rl.method import loss_form

_SCALARS = {"int": int, "float": float, "bool": bool, "str": str}
#: Former flattened spellings of a composed field -> its path inside the section.
MOVED = {"loss_kind": "loss.kind"}


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
    """A typed section's fields as command-line values (tuples kept, composed settings as
    sub-sections under their field names)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        out[f.name] = ConfigDict(section_values(value)) if dataclasses.is_dataclass(value) else _leaf(f, value)
    return out


def _derived_norm_length(aggregation: str, max_new_tokens: int) -> int | None:
    return max_new_tokens if aggregation == "seq_sum_norm" else None


def to_config_dict(run: RunConfig) -> ConfigDict:
    """The ConfigDict of `run` (module docstring); ``from_config_dict`` of it gives `run` back."""
    tree = section_values(run)
    loss_tree, loss = tree["algo"]["loss"], run.algo.loss
    loss_tree["kind"] = "auto" if loss.kind == loss_form(run.algo.estimator) else loss.kind
    derived = _derived_norm_length(loss.aggregation, run.rollout.sampler.max_new_tokens)
    loss_tree["norm_length"] = FieldReference(None if loss.norm_length == derived else loss.norm_length,
                                              field_type=int)
    return ConfigDict(tree)


def _tuples(value: Any) -> Any:
    """Lists (e.g. from JSON) -> tuples, recursively."""
    if isinstance(value, (list, tuple)):
        return tuple(_tuples(v) for v in value)
    return value


def _moved(cls: type, key: str, section: str) -> str:
    """" (did you mean ...?)" when `key` is the former flattened spelling of a field of one of
    `cls`'s composed settings (``rollout.n`` -> ``rollout.sampler.n``), else ""."""
    if key in MOVED:
        return f" (did you mean {section}.{MOVED[key]}?)"
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        sub = hints[f.name]
        if dataclasses.is_dataclass(sub) and key in {s.name for s in dataclasses.fields(sub)}:
            return f" (did you mean {section}.{f.name}.{key}?)"
    return ""


def build_section(cls: type, values: Mapping[str, Any], section: str,
                  context: Mapping[str, Any] | None = None, defaults: Any = None) -> Any:
    """An instance of the section class `cls` from its ConfigDict fields (missing = the field of
    `defaults`, an instance of `cls`; None = ``cls()``); composed settings are sub-sections,
    built the same way (the loss's "auto" kind and derived norm_length resolved)."""
    values = dict(values)
    hints = typing.get_type_hints(cls)
    if defaults is None:
        defaults = cls()   # the section's defaults, e.g. the sampler and loss settings not overridden
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ValueError(f"{section} has no field(s) {unknown}; valid fields: {', '.join(sorted(names))}"
                         + _moved(cls, unknown[0], section))
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        sub_cls = hints[f.name]
        if f.name not in values and sub_cls is not losses.LossConfig:
            continue
        value = values.get(f.name, {})     # the loss is always resolved ("auto" kind, norm_length)
        if dataclasses.is_dataclass(sub_cls) and isinstance(value, Mapping):
            sub = dict(value)
            if sub_cls is losses.LossConfig:
                sub = _resolve_loss(sub, values.get("estimator", getattr(defaults, "estimator", "")), context or {})
            kwargs[f.name] = build_section(sub_cls, sub, f"{section}.{f.name}", context,
                                           defaults=getattr(defaults, f.name))
        else:
            kwargs[f.name] = _tuples(value)
    try:
        return dataclasses.replace(defaults, **kwargs)
    except ValueError as err:   # a composed type validates itself with bare field names: add the path
        raise on_path(err, section, names) from err


def _resolve_loss(sub: dict[str, Any], estimator: str, context: Mapping[str, Any]) -> dict[str, Any]:
    """loss kind "auto" -> the registry's form; norm_length None -> rollout.sampler.max_new_tokens for
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
