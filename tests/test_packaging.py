"""setup.cfg declares ranges (the library installs where researchers are), requirements.txt the exact lock.

The package must install on Python 3.11-3.13 (CI's 3.11, Colab's and the GPU / TPU images' 3.12), its
requirements must admit the locked versions that ./setup.sh and CI install and the accelerator images'
jax 0.11.2, and it must never pin jax exactly nor pull torch into a runtime (which would replace the
accelerator's jax or add gigabytes): torch is a test-only dependency.
"""
import configparser
import pathlib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _setup_cfg() -> configparser.ConfigParser:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    return cfg


def _requirements(text: str) -> list[Requirement]:
    return [Requirement(line.strip()) for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def _lock() -> dict[str, Version]:
    """requirements.txt as {canonical name: exact version}; every line must be an exact pin."""
    lock = {}
    for req in _requirements((ROOT / "requirements.txt").read_text()):
        (spec,) = req.specifier
        assert spec.operator == "==", f"requirements.txt line {req} is not an exact pin"
        lock[canonicalize_name(req.name)] = Version(spec.version)
    return lock


def test_python_requires_admits_3_11_to_3_13():
    from packaging.specifiers import SpecifierSet
    spec = SpecifierSet(_setup_cfg()["options"]["python_requires"])
    for version in ("3.11.7", "3.12.1", "3.13.0"):
        assert spec.contains(version), (version, str(spec))
    assert not spec.contains("3.10.13"), str(spec)


def test_install_requires_are_ranges_admitting_the_lock_and_the_gpu_image():
    reqs = _requirements(_setup_cfg()["options"]["install_requires"])
    lock = _lock()
    assert len(reqs) >= 20, [str(r) for r in reqs]
    by_name = {canonicalize_name(r.name): r for r in reqs}
    for name, req in by_name.items():
        operators = {s.operator for s in req.specifier}
        assert "==" not in operators and "===" not in operators, f"{req} is an exact pin: give a tested range"
        assert operators & {">=", ">"} and operators & {"<", "<="}, f"{req} needs a lower and an upper bound"
        assert name in lock, f"{req.name} is required but not locked in requirements.txt"
        assert req.specifier.contains(lock[name], prereleases=False), f"{req} excludes the locked {lock[name]}"
    # the accelerator image the code was run on: jax 0.11.2 with its CUDA plugin, flax 0.12.8, optax 0.2.8;
    # and the newer jax the suite was run with on Python 3.12: jax 0.12.0.1, flax 0.12.12
    for image in ({"jax": "0.11.2", "jaxlib": "0.11.2", "flax": "0.12.8", "optax": "0.2.8"},
                  {"jax": "0.12.0.1", "jaxlib": "0.12.0.1", "flax": "0.12.12"}):
        for name, version in image.items():
            assert by_name[name].specifier.contains(version), (str(by_name[name]), version)
    assert by_name["jax"].specifier.contains("0.10.2") and not by_name["jax"].specifier.contains("0.9.2")
    assert "torch" not in by_name, "torch must stay a test-only dependency"


def test_extras_name_the_accelerators_at_the_jax_range():
    extras = _setup_cfg()["options.extras_require"]
    assert {"cuda", "tpu", "test", "notebooks"} <= set(extras), sorted(extras)
    jax_range = next(r for r in _requirements(_setup_cfg()["options"]["install_requires"]) if r.name == "jax").specifier
    for extra, flavour in (("cuda", "cuda12"), ("tpu", "tpu")):
        (req,) = _requirements(extras[extra])
        assert req.name == "jax" and flavour in req.extras and req.specifier == jax_range, (extra, str(req))
    lock = _lock()
    for extra in ("test", "notebooks"):
        for req in _requirements(extras[extra]):
            name = canonicalize_name(req.name)
            assert name in lock and req.specifier.contains(lock[name]), f"extra {extra}: {req} vs lock"
