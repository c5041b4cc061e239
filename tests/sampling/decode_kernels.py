"""Which Pallas kernels the sampler's decode loop runs: its jaxpr traced on abstract inputs (no compile).

On CPU a Pallas kernel is interpreted: its lowering is plain HLO loops, no custom call, so the kernel is
found where it is still named -- the ``pallas_call`` equations of the traced ``sampling.decode_loop``
(``name`` = the kernel's name, ``interpret`` = whether it runs interpreted).  ``platform="gpu"`` traces
under an abstract mesh of one GPU device (what a deviceless GPU compile sees), so every "auto" choice
is the GPU's, without a GPU or the CUDA plugin.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.extend import core as jex
from jax.sharding import AbstractDevice, AbstractMesh, AxisType

from maxk_jax.models import qwen2
from maxk_jax.sampling import SamplerSettings, decode_loop


def pallas_calls(jaxpr: jex.Jaxpr) -> list[tuple[str, bool]]:
    """(kernel name, interpret) of every ``pallas_call`` in `jaxpr` and its sub-jaxprs (loop bodies,
    nested jits), in program order."""
    out = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "pallas_call":
            out.append((str(eqn.params["name"]), bool(eqn.params["interpret"])))
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(sub, jex.ClosedJaxpr):
                    out += pallas_calls(sub.jaxpr)
                elif isinstance(sub, jex.Jaxpr):
                    out += pallas_calls(sub)
    return out


def abstract_mesh(platform: str) -> AbstractMesh:
    """An abstract mesh of one `platform` device (a deviceless topology's view, e.g. "gpu")."""
    return AbstractMesh((1,), ("data",), axis_types=(AxisType.Auto,),
                        abstract_device=AbstractDevice(device_kind=platform, num_cores=None, platform=platform))


def decode_loop_kernels(config: qwen2.Qwen2Config, settings: SamplerSettings, *, prompts: int = 2,
                        prompt_bucket: int = 16, key_impl: str | None = None,
                        platform: str | None = None) -> list[tuple[str, bool]]:
    """`pallas_calls` of ``sampling.decode_loop`` for `prompts` x ``settings.n`` rows (mesh None) traced on
    abstract inputs; `platform` None: this machine's, else under `abstract_mesh(platform)`."""
    b = prompts * settings.n
    params = jax.eval_shape(lambda: qwen2.init_params(config, jax.random.key(0)))
    cache = jax.eval_shape(lambda: qwen2.init_cache(config, prompts, prompt_bucket,
                                                    max(settings.max_new_tokens - 1, 1), settings.n))
    keys = jax.eval_shape(lambda: jax.random.split(jax.random.key(0, impl=key_impl), b))
    sds = jax.ShapeDtypeStruct
    args = (sds((b, config.vocab_size), jnp.float32), cache, keys, sds((b,), jnp.int32), sds((b,), jnp.bool_),
            sds((8,), jnp.int32), sds((), jnp.int32))
    if platform is None:
        return pallas_calls(decode_loop.trace(config, settings, None, params, *args).jaxpr.jaxpr)
    with jax.sharding.use_abstract_mesh(abstract_mesh(platform)):
        return pallas_calls(decode_loop.trace(config, settings, None, params, *args).jaxpr.jaxpr)
