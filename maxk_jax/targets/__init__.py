"""Compile targets without the hardware: GPU target descriptions (``*.txtpb``, :mod:`maxk_jax.gpu_plan`)
and TPU slices (:mod:`maxk_jax.targets.tpu`)."""
