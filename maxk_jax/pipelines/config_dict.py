"""The pipeline config as an ml_collections ConfigDict: the command line's form of `PipelineConfig`,
one conversion each way, built with the run config's machinery (``maxk_jax.rl.config_dict``).

    cfg = to_config_dict(default_config())                 # experiments/configs/tiny.py:get_config
    pipe = from_config_dict(FLAGS.config, shortcut_overrides(estimator=FLAGS.estimator, ...))

The tree has the typed config's shape and spelling: one section per `PipelineConfig` section,
composed settings as sub-sections under their field names -- ``warmup.config.{steps, seed,
batch_size, learning_rate, ...}`` (`maxk_jax.rl.warmup.WarmupConfig`) beside ``warmup.per_problem``
and ``warmup.noise``, ``eval.sampler.{n, max_new_tokens, temperature, top_k, top_p}``; ``rl`` is the
RL run's own ConfigDict (``maxk_jax.rl.config_dict``).  Values keep their types, e.g.
``--config.data.options="(('seed', 0),)"``.
"""
from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any

from ml_collections import ConfigDict

from maxk_jax.pipelines.config import SECTION_TYPES, PipelineConfig
from maxk_jax.rl import config_dict as rl_config_dict
from maxk_jax.rl.config_dict import build_section, section_values


def section_dict(section: Any) -> dict[str, Any]:
    """One section (a settings dataclass) as the plain dict of its ConfigDict form (composed
    settings as nested dicts), e.g. ``section_dict(cfg.warmup)``."""
    return ConfigDict(section_values(section)).to_dict()


def to_config_dict(cfg: PipelineConfig) -> ConfigDict:
    """The ConfigDict of `cfg` (module docstring); ``from_config_dict`` of it gives `cfg` back."""
    tree: dict[str, Any] = {}
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if f.name == "rl":
            tree[f.name] = rl_config_dict.to_config_dict(value)
        elif f.name in SECTION_TYPES:
            tree[f.name] = ConfigDict(section_values(value))
        else:
            tree[f.name] = value
    return ConfigDict(tree)


def _set_path(tree: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    node = tree
    for part in parents:
        node = node.get(part)
        if not isinstance(node, dict):
            raise ValueError(f"the pipeline config has no section {path.rsplit('.', 1)[0]!r} (in {path!r})")
    if leaf not in node:
        raise ValueError(f"the pipeline config has no field {path!r}")
    node[leaf] = value


def from_config_dict(cfg: ConfigDict | Mapping[str, Any],
                     overrides: Mapping[str, Any] | None = None) -> PipelineConfig:
    """The `PipelineConfig` of a pipeline ConfigDict (or its ``to_dict()`` / pipeline_config.json
    form) with `overrides` (dotted paths of the tree, e.g. `shortcut_overrides`) applied first, so
    everything is validated once, together. ValueError naming the field and value of any bad
    setting (``rl.<section>.<field>`` inside the RL run), or the fields a section does not have."""
    tree = cfg.to_dict() if isinstance(cfg, ConfigDict) else copy.deepcopy(dict(cfg))
    for path, value in (overrides or {}).items():
        _set_path(tree, path, value)
    defaults = PipelineConfig()
    kwargs: dict[str, Any] = {}
    for name, cls in SECTION_TYPES.items():
        if name not in tree:
            continue
        section = tree.pop(name)
        if not isinstance(section, Mapping):
            raise ValueError(f"{name}={section!r} must be a config section")
        try:
            if name == "rl":
                kwargs[name] = rl_config_dict.from_config_dict(section)
            else:
                kwargs[name] = build_section(cls, section, name, defaults=getattr(defaults, name))
        except (ValueError, TypeError) as err:
            message = str(err)
            if name == "rl":
                raise ValueError(f"rl.{message}") from err
            raise ValueError(message if message.startswith(name) else f"{name}: {message}") from err
    rl_config_dict.check_top_level(tree, PipelineConfig, SECTION_TYPES, "the pipeline config")
    return PipelineConfig(**kwargs, **tree)
