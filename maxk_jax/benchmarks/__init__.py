"""What the bench_* entry points under experiments/ share, one concept a module: the timer
(timing), the decode timing with its ceilings and case syntax (decode), the random RL rollout
batch (rollout_batch), the PyTorch + transformers baselines (torch_baselines: torch imported
inside its functions, so it stays optional), bench_accelerator's table, plot and writer
(accelerator_report) and the paper's Listings 2 and 3 in jnp, the estimators' O(n^2) baselines
(paper_listings). Imports nothing, so a script loads only the module it uses."""
