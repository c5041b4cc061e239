"""Planners over compiled programs, used by the plan_* and bench_* entry points: per-device
memory plans (memory_plan), the deviceless GPU plans and their target descriptions (gpu_plan,
targets/), the sampler's decode-loop plan (sample_plan), what bounds a step (step_roofline),
simulated CPU devices (simulated_devices: set up before JAX starts, so this __init__ imports
nothing) and profiler-trace summaries (trace_summary)."""
