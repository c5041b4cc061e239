"""TPU slices the planners compile for without a TPU: MaxText's names -> topology, HBM, bf16 peak.

XLA:TPU compiles on a CPU-only machine from a topology description, the way MaxText's
``train_compile.py`` does: install the libtpu that jax's ``tpu`` extra pins beside the project
(docs/accelerators.md, "TPU compiler"), then ``jax.experimental.topologies.get_topology_desc``
gives compile-only TPU devices for a ``Mesh`` (:func:`devices`); ``jit(f).lower(<sharded
ShapeDtypeStructs>).compile()`` returns the TPU compiler's program, and a program over HBM fails
to compile (``RESOURCE_EXHAUSTED``) as on the chip.

Names (:data:`SLICES`): ``v5e-N`` / ``v6e-N`` count chips; ``v4-N`` / ``v5p-N`` count TensorCores,
two per chip, one device per chip (``megacore``); ``v2-8`` / ``v3-8`` count TensorCores, one device
each (8 devices on 4 chips). Per-device figures (:data:`CHIPS`) are the vendor's: HBM, bf16 peak
FLOP/s, HBM bandwidth.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import os
from typing import Any

GIB = 1024 ** 3


@dataclasses.dataclass(frozen=True)
class Chip:
    """One TPU generation, per JAX device: ``kind`` (its name), ``hbm_gib``, ``bf16_flops`` (peak
    FLOP/s), ``hbm_bandwidth`` (bytes/s), ``chip_config`` (libtpu's ``chip_config_name``:
    ``megacore`` where two TensorCores make one device) and ``devices_per_chip`` (2 on v2 / v3,
    whose TensorCores are a device each: the figures are then per core)."""

    kind: str
    hbm_gib: float
    bf16_flops: float
    hbm_bandwidth: float
    chip_config: str = "default"
    devices_per_chip: int = 1


#: Per-device figures (Google Cloud's TPU pages; v2 / v3: a chip's halves, one per TensorCore).
CHIPS: dict[str, Chip] = {
    "v2": Chip("TPU v2 (per core)", 8, 22.5e12, 3.5e11, devices_per_chip=2),
    "v3": Chip("TPU v3 (per core)", 16, 61.5e12, 4.5e11, devices_per_chip=2),
    "v4": Chip("TPU v4", 32, 275e12, 1.2e12, "megacore"),
    "v5e": Chip("TPU v5e", 16, 197e12, 8.19e11),
    "v5p": Chip("TPU v5p", 95, 459e12, 2.765e12, "megacore"),
    "v6e": Chip("TPU v6e", 32, 918e12, 1.64e12),
}

#: MaxText-style slice name -> (generation, libtpu topology name, chips per host bounds).
SLICES: dict[str, tuple[str, str, tuple[int, int, int]]] = {
    "v5e-1": ("v5e", "v5e:1x1", (1, 1, 1)), "v5e-4": ("v5e", "v5e:2x2", (2, 2, 1)),
    "v5e-8": ("v5e", "v5e:2x4", (2, 4, 1)), "v5e-16": ("v5e", "v5e:4x4", (2, 2, 1)),
    "v5e-32": ("v5e", "v5e:4x8", (2, 2, 1)),
    "v6e-1": ("v6e", "v6e:1x1", (1, 1, 1)), "v6e-4": ("v6e", "v6e:2x2", (2, 2, 1)),
    "v6e-8": ("v6e", "v6e:2x4", (2, 4, 1)), "v6e-16": ("v6e", "v6e:4x4", (2, 2, 1)),
    "v4-8": ("v4", "v4:2x2x1", (2, 2, 1)), "v4-16": ("v4", "v4:2x2x2", (2, 2, 1)),
    "v4-32": ("v4", "v4:2x2x4", (2, 2, 1)),
    "v5p-8": ("v5p", "v5:2x2x1", (2, 2, 1)), "v5p-16": ("v5p", "v5:2x2x2", (2, 2, 1)),
    # v2 / v3 (a Colab TPU runtime is a v2-8): "-8" counts TensorCores, one device each
    "v2-8": ("v2", "v2:2x2", (2, 2, 1)), "v3-8": ("v3", "v3:2x2", (2, 2, 1)),
}

LIBTPU_HINT = ("a TPU plan needs libtpu (the TPU compiler; no TPU needed): pip install --no-deps --target DIR "
               "'libtpu==0.0.42.*', then run with PYTHONPATH=DIR (docs/accelerators.md, 'TPU compiler')")


@dataclasses.dataclass(frozen=True)
class TpuSlice:
    """A named slice: ``name`` (e.g. ``v5e-16``), ``chip`` (:class:`Chip`), ``topology`` (libtpu's
    name, e.g. ``v5e:4x4``), ``chips_per_host`` bounds and ``chips`` (devices of the slice)."""

    name: str
    chip: Chip
    topology: str
    chips_per_host: tuple[int, int, int]

    @property
    def chips(self) -> int:
        """JAX devices of the slice (chips; TensorCores on v2 / v3): the product of the
        topology's dimensions times the chip's ``devices_per_chip``."""
        n = self.chip.devices_per_chip
        for d in self.topology.split(":")[1].split("x"):
            n *= int(d)
        return n

    @property
    def hbm_bytes(self) -> int:
        """HBM bytes per device (per chip, or per core on v2 / v3)."""
        return int(self.chip.hbm_gib * GIB)

    def time_floor_s(self, flops_per_chip: float) -> float:
        """Seconds ``flops_per_chip`` matmul FLOPs take at the chip's bf16 peak (a lower bound)."""
        return flops_per_chip / self.chip.bf16_flops


def is_tpu_target(name: str) -> bool:
    """True for a name of :data:`SLICES` (``v5e-16``, ...)."""
    return name in SLICES


def get_slice(name: str) -> TpuSlice:
    """The :class:`TpuSlice` named ``name``; ValueError naming it and the known names otherwise."""
    if name not in SLICES:
        raise ValueError(f"unknown TPU slice {name!r}; available: {sorted(SLICES, key=_order)}")
    gen, topology, bounds = SLICES[name]
    return TpuSlice(name, CHIPS[gen], topology, bounds)


def _order(name: str) -> tuple[str, int]:
    gen, n = name.rsplit("-", 1)
    return gen, int(n)


def libtpu_available() -> bool:
    """Whether the TPU compiler (the ``libtpu`` package) is importable."""
    return importlib.util.find_spec("libtpu") is not None


def setup_environment() -> None:
    """Environment for a compile-only libtpu without TPU chips; call before JAX starts: the default
    backend stays the CPU (``JAX_PLATFORMS=cpu``), no cloud metadata query, and several processes may
    load libtpu at once (else the second fails on libtpu's lockfile). Values already set are kept."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")   # quiets libtpu's worker-address warnings


def devices(slice_: TpuSlice) -> list[Any]:
    """The slice's compile-only TPU devices (``get_topology_desc``); ValueError with the install
    hint when libtpu is absent."""
    if not libtpu_available():
        raise ValueError(LIBTPU_HINT)
    from jax.experimental import topologies

    topo = topologies.get_topology_desc(platform="tpu", topology_name=slice_.topology,
                                        chip_config_name=slice_.chip.chip_config,
                                        chips_per_host_bounds=slice_.chips_per_host, num_slices=1)
    return list(topo.devices)


def ordered(devs: list[Any], shape: tuple[int, ...]) -> list[Any]:
    """``devs`` in the physical order ``mesh_utils.create_device_mesh`` gives a mesh of ``shape``
    (neighbours on the torus next to each other), or as they are where it has no mapping."""
    from jax.experimental import mesh_utils

    try:
        return list(mesh_utils.create_device_mesh(shape, devs).flat)
    except (ValueError, NotImplementedError, AssertionError):
        return devs
