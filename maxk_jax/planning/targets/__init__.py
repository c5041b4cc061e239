"""Compile targets without the hardware: GPU target descriptions (``*.txtpb``, :mod:`maxk_jax.planning.gpu_plan`)
and TPU slices (:mod:`maxk_jax.planning.targets.tpu`)."""
