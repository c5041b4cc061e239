"""Where a program runs: the device mesh and logical-axis sharding rules (sharding), per-host
blocks and allgathers of a multi-controller run (multihost), orbax checkpoints (checkpoint) and
the host description the records name (machine). This __init__ imports nothing."""
