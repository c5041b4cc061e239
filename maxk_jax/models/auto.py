"""What the ``"auto"`` model settings resolve to on the device at hand (one place for every rule).

The defaults themselves (``"auto"``) live in :mod:`maxk_jax.models.qwen2_config`
(``DEFAULT_DECODE_ATTENTION``, ``DEFAULT_REMAT_POLICY``); ``Qwen2Config`` and the RL run config
(``rl.run_config.ModelSettings``) both take them from there. The rules:

* decode attention (:func:`decode_attention`): the Pallas Triton kernels of
  ``models.decode_attention`` where they compile and run -- a GPU of compute capability >= 8.0
  (:data:`PALLAS_MIN_CAPABILITY`; Triton in XLA refuses older cards such as the T4, 7.5) -- else
  ``"xla"``, saying so once (an info line). A GPU without a capability to read (a deviceless
  compile on a machine without a GPU) is taken to be the card being planned for: ``"pallas"``.
* remat policy (:func:`remat_policy`): off GPU ``"nothing"`` (no compile); on a GPU the fastest of
  :data:`REMAT_BY_SPEED` whose compiled train step (``memory_analysis()`` total) fits
  :data:`MEMORY_MARGIN` of the device's memory (``memory_stats()['bytes_limit']``), else
  ``"nothing"`` (the least memory); ``"nothing"`` as well, with an info line, when the memory is
  unknown. `memory_plan.train_step_remat` compiles the RL train step's candidates for it. Inside a trace
  nothing can be compiled: there ``qwen2.resolve_remat_policy`` keeps the platform's rule, so the
  RL loop resolves ``"auto"`` with `memory_plan.train_step_remat` before it builds its step.
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
from absl import logging

PALLAS_MIN_CAPABILITY = (8, 0)
#: remat policies from the fastest to the least memory (H200, 1.5B train step: dots 1.34x, nothing
#: 1.19x a PyTorch step; docs/accelerators.md)
REMAT_BY_SPEED = ("dots", "nothing")
MEMORY_MARGIN = 0.9    # share of the device's memory a train step may plan to use
_SAID: set[str] = set()


def _say_once(message: str) -> None:
    if message not in _SAID:
        _SAID.add(message)
        logging.info("%s", message)


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    """What the rules read of a device: ``platform`` ("cpu" | "gpu" | "tpu"), ``compute_capability``
    ((major, minor) or None: unknown), ``bytes_limit`` (memory bytes or None: unknown), ``kind``."""

    platform: str
    compute_capability: tuple[int, int] | None = None
    bytes_limit: int | None = None
    kind: str = ""

    @classmethod
    def of(cls, device: Any) -> "DeviceInfo":
        """The description of a jax device (a real one, or a deviceless topology's)."""
        platform = str(getattr(device, "platform", "cpu"))
        platform = "gpu" if platform in ("gpu", "cuda", "rocm") else platform
        return cls(platform=platform, compute_capability=compute_capability(device),
                   bytes_limit=bytes_limit(device), kind=str(getattr(device, "device_kind", "")))


def compute_capability(device: Any) -> tuple[int, int] | None:
    """``device.compute_capability`` ("8.0" on jax's CUDA devices) as (major, minor); None when the
    device has no such attribute (a CPU, a TPU, a deviceless topology's device); (0, 0) when it has
    one that is not "major.minor" (ROCm's "gfx90a": not a CUDA card)."""
    text = getattr(device, "compute_capability", None)
    if text is None:
        return None
    try:
        major, minor = str(text).split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return 0, 0


def bytes_limit(device: Any) -> int | None:
    """``device.memory_stats()['bytes_limit']`` (what the allocator may use); None where the device
    reports no memory statistics (CPU, a deviceless topology)."""
    try:
        stats = device.memory_stats()
    except Exception:  # noqa: BLE001 - unimplemented on some backends
        return None
    value = (stats or {}).get("bytes_limit")
    return int(value) if value else None


@functools.cache
def _local_gpu() -> Any:
    try:
        return jax.devices("gpu")[0]
    except Exception:  # noqa: BLE001 - no GPU backend in this process
        return None


def context_device(platform: str | None = None) -> Any:
    """The device a trace compiles for: the ambient mesh's (its abstract device when it carries a
    compute capability), else this process's first GPU when ``platform`` is a GPU, else None."""
    device = getattr(jax.sharding.get_abstract_mesh(), "abstract_device", None)
    if device is not None and compute_capability(device) is not None:
        return device
    if platform in ("gpu", "cuda", "rocm"):
        return _local_gpu()
    return None


def decode_attention(platform: str, device: Any = None) -> str:
    """``"auto"`` decode attention on ``platform`` ("cpu" | "gpu" | "tpu") and ``device`` (a jax
    device or a `DeviceInfo`; None: not known): ``"xla"`` off GPU; on a GPU ``"pallas"`` when the
    compute capability is >= :data:`PALLAS_MIN_CAPABILITY` or unknown (no device, a deviceless
    plan: the card planned for), else ``"xla"`` with an info line (once)."""
    if platform not in ("gpu", "cuda", "rocm"):
        return "xla"
    info = None if device is None else device if isinstance(device, DeviceInfo) else DeviceInfo.of(device)
    cc = None if info is None else info.compute_capability
    if cc is None or cc >= PALLAS_MIN_CAPABILITY:
        return "pallas"
    _say_once(f"decode_attention='auto': {info.kind or 'this GPU'} has compute capability {cc[0]}.{cc[1]} "
              f"(the Pallas Triton kernels need >= {PALLAS_MIN_CAPABILITY[0]}.{PALLAS_MIN_CAPABILITY[1]}), "
              "using the xla decode attention")
    return "xla"


def remat_policy(device: Any, memory_of: Callable[[str], int], *, margin: float = MEMORY_MARGIN,
                 candidates: Sequence[str] = REMAT_BY_SPEED) -> str:
    """``"auto"`` remat on ``device`` (a jax device or a `DeviceInfo`): off GPU ``"nothing"``
    (``memory_of`` not called); on a GPU the first of ``candidates`` (fastest first) with
    ``memory_of(policy)`` (per-device bytes of the compiled train step) <= ``margin`` x the device's
    bytes_limit; ``"nothing"`` when none fits or the memory is unknown (an info line once)."""
    if not 0 < margin <= 1:
        raise ValueError(f"margin={margin!r} must be in (0, 1]")
    info = device if isinstance(device, DeviceInfo) else DeviceInfo.of(device)
    if info.platform != "gpu":
        return "nothing"
    if info.bytes_limit is None:
        _say_once(f"remat_policy='auto': {info.kind or 'this GPU'} reports no memory limit, using 'nothing'")
        return "nothing"
    budget = margin * info.bytes_limit
    needs = {}
    for policy in candidates:
        needs[policy] = int(memory_of(policy))
        if needs[policy] <= budget:
            if policy != candidates[0]:
                _say_once(f"remat_policy='auto': {candidates[0]} needs {needs[candidates[0]] / 2**30:.1f} GiB > "
                          f"{margin:.0%} of {info.bytes_limit / 2**30:.1f} GiB, using {policy!r}")
            return policy
    _say_once(f"remat_policy='auto': no policy fits {margin:.0%} of {info.bytes_limit / 2**30:.1f} GiB "
              f"({', '.join(f'{p} {b / 2**30:.1f} GiB' for p, b in needs.items())}), using 'nothing'")
    return "nothing"
