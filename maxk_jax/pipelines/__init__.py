"""Pipelines: the laptop main job and the method comparison as library code (the absl mains in
experiments/ only parse flags and call these).

    out = run_pipeline(cfg)                        # cfg: a PipelineConfig, e.g. default_config()
    out = run_comparison(cfg, ["grpo", "maxk_offpolicy_exact_loo1_rms"], [0, 1], name="cmp")

Modules: ``config`` (the typed `PipelineConfig`, command-line shortcuts, validation, the derived
RL config), ``config_dict`` (its ml_collections form: one conversion each way), ``base_model`` (synthetic data + tokenizer + tiny Qwen2 + warm-up, cached by a settings
hash), ``evaluation`` (the run's judge, paired evaluation of a model, the trained checkpoint),
``phases`` (phase timing, multi-host ordering, JSON records), ``tiny`` (the main job and its
report), ``methods`` (the method registry `maxk_jax.rl.method` applied to pipeline configs), ``compare`` (the
comparison: runs, resume checks, its phases), ``compare_results`` (aggregation over seeds, Wilcoxon
tests, curves, results.md), ``compare_plots``.
"""
from maxk_jax.pipelines.base_model import (BASE_FORMAT_VERSION, base_key, base_settings, build_base,
                                           prepare_base, prepare_data, settings_hash)
from maxk_jax.pipelines.compare import (TRAIN_STATS, aggregate, comparison_settings, results_markdown,
                                        run_comparison, training_stats)
from maxk_jax.pipelines.compare_plots import plot_eval_curves, plot_frontier, plot_max_at_k
from maxk_jax.pipelines.config import (PipelineConfig, PipelineData, PipelineEval, TinyModelSettings,
                                       TokenizerSettings, WarmupPhase, apply_overrides, check_estimator, default_config,
                                       testbed_config,
                                       rl_config, rl_defaults, shortcut_overrides, smoke_config, toy_config, uses_judge_cache,
                                       validate_config)
from maxk_jax.pipelines.config_dict import from_config_dict, section_dict, to_config_dict
from maxk_jax.pipelines.evaluation import eval_problems, eval_sampler, evaluate_model, load_trained, open_judge
from maxk_jax.pipelines.methods import (DEFAULT_METHOD, REFERENCE, TABLE2_METHODS, VARIANTS, MethodEntry, MethodSpec,
                                        MethodTable, apply_method, default_reference, method_spec, validate_methods)
from maxk_jax.pipelines.phases import PhaseTimer, lead_first, write_json
from maxk_jax.pipelines.tiny import report_markdown, run_pipeline

__all__ = [
    "BASE_FORMAT_VERSION", "DEFAULT_METHOD", "REFERENCE", "TABLE2_METHODS", "TRAIN_STATS", "VARIANTS", "MethodEntry",
    "MethodSpec", "MethodTable", "PhaseTimer", "PipelineConfig", "PipelineData", "PipelineEval",
    "TinyModelSettings", "TokenizerSettings", "WarmupPhase", "aggregate", "apply_method", "apply_overrides",
    "base_key", "base_settings", "build_base", "check_estimator", "comparison_settings", "default_config",
    "default_reference", "testbed_config",
    "eval_problems", "eval_sampler", "evaluate_model", "from_config_dict", "lead_first", "load_trained",
    "method_spec", "open_judge", "plot_eval_curves", "plot_frontier", "plot_max_at_k", "prepare_base", "prepare_data",
    "report_markdown", "results_markdown", "rl_config", "rl_defaults", "run_comparison",
    "run_pipeline", "section_dict", "settings_hash", "shortcut_overrides",
    "smoke_config", "to_config_dict", "toy_config", "training_stats", "uses_judge_cache", "validate_config",
    "validate_methods", "write_json",
]
