"""The absl flags the memory planners share (the planned model and the mesh layouts), and the model they name.

Called by the entry points only (``experiments/plan_memory.py``, ``experiments/plan_train.py``):
importing this module defines no flag.
"""
from __future__ import annotations

from absl import flags

from maxk_jax.models import qwen2
from maxk_jax.planning.memory_plan import check_device_count, layout_sizes, planned_config


def define_flags(*, param_dtype: str, results_dir: str, flag_values: flags.FlagValues | None = None) -> None:
    """Defines the absl flags of the planned model and layouts both planners share: --preset,
    --layers, --dtype, --param_dtype (default ``param_dtype``), --remat, --remat_policy, --attention,
    --attention_chunk,
    --layouts, --results_dir
    (default ``results_dir``), in ``flag_values`` (default ``absl.flags.FLAGS``). Called by the
    entry points only (importing this module defines no flag)."""
    fv = flags.FLAGS if flag_values is None else flag_values
    flags.DEFINE_string("preset", "qwen2.5-coder-7b", f"Model preset, one of {sorted(qwen2.PRESETS)}.",
                        flag_values=fv)
    flags.DEFINE_integer("layers", 0, "Override the number of decoder layers (0 = the preset's).",
                         flag_values=fv)
    flags.DEFINE_enum("dtype", "bfloat16", ["bfloat16", "float32"], "Compute dtype of the matmuls.",
                      flag_values=fv)
    flags.DEFINE_enum("param_dtype", param_dtype, ["bfloat16", "float32"],
                      "Parameter storage dtype (Adam state too, in the train-step plan).", flag_values=fv)
    flags.DEFINE_bool("remat", True, "Rematerialise each decoder layer in the backward pass.", flag_values=fv)
    flags.DEFINE_enum("remat_policy", "nothing", list(qwen2.REMAT_POLICIES),
                      "What a rematerialised layer keeps (nothing: recompute it all; dots: keep the projections' "
                      "outputs, recompute no matmul but the attention's).", flag_values=fv)
    flags.DEFINE_enum("attention", "chunked", ["auto", "xla", "chunked", "dot_product"],
                      "Attention of the forward/backward (maxk_jax.models.attention; auto = dot_product on GPU, "
                      "chunked elsewhere).", flag_values=fv)
    flags.DEFINE_integer("attention_chunk", 512, "Queries per block of the chunked attention.", flag_values=fv)
    flags.DEFINE_list("layouts", ["fsdp8", "fsdp4_tensor2", "fsdp2_tensor4", "data2_fsdp4"],
                      "Mesh layouts to plan, e.g. fsdp4_tensor2 (sizes must multiply to the devices).",
                      flag_values=fv)
    flags.DEFINE_string("results_dir", results_dir, "Directory for the JSON/markdown/PNG results.",
                        flag_values=fv)


def config_from_flags(num_devices: int, flag_values: flags.FlagValues | None = None) -> qwen2.Qwen2Config:
    """The model of --preset --layers --dtype --param_dtype --remat --remat_policy (`define_flags`; parsed
    ``flag_values``, default ``absl.flags.FLAGS``), after checking that JAX sees ``num_devices``
    devices and that every --layouts uses all of them (ValueError otherwise)."""
    fv = flags.FLAGS if flag_values is None else flag_values
    check_device_count(num_devices)
    for layout in fv.layouts:
        layout_sizes(layout, num_devices)
    return planned_config(fv.preset, layers=fv.layers, dtype=fv.dtype, param_dtype=fv.param_dtype,
                          remat=fv.remat, attention=fv.attention, attention_chunk=fv.attention_chunk,
                          remat_policy=fv.remat_policy)
