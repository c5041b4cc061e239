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



# --- setup.sh: which Python it takes (run on a copy of the script with fake interpreters; nothing installs) ---
_FAKE_PYTHON = r"""#!/bin/sh
# A fake interpreter: answers setup.sh's version probe with VERSION, makes a venv of itself, fails otherwise.
echo "$(basename "$0") $*" >> "$LOG"
case "$*" in
  "-c import sys; print(\"%d.%d\" % sys.version_info[:2])") echo VERSION ;;
  "-m venv .venv") mkdir -p .venv/bin && cp "$0" .venv/bin/python ;;
  *) exit 3 ;;
esac
"""


def _fake_pythons(base: pathlib.Path, fakes: dict[str, str | None]) -> None:
    """Interpreters under base/bin: {name: the version it reports, or None for a shim that fails (pyenv's shim of
    a version it does not have)}; setup.sh copied to base/repo."""
    import shutil
    (base / "repo").mkdir(parents=True, exist_ok=True)
    (base / "bin").mkdir(exist_ok=True)
    shutil.copy(ROOT / "setup.sh", base / "repo" / "setup.sh")
    for name, version in fakes.items():
        script = base / "bin" / name
        script.write_text(_FAKE_PYTHON.replace("VERSION", version) if version else "#!/bin/sh\nexit 127\n")
        script.chmod(0o755)


def _run_setup(base: pathlib.Path, **env: str) -> tuple[int, str, list[str]]:
    """Runs base/repo/setup.sh with PATH = base/bin + the system's tools: (exit status, stderr, interpreter calls)."""
    import subprocess
    log = base / "calls.log"
    log.write_text("")
    proc = subprocess.run(["bash", str(base / "repo" / "setup.sh")], capture_output=True, text=True, timeout=60,
                          env={"PATH": f"{base / 'bin'}:/usr/bin:/bin:/usr/sbin:/sbin", "HOME": str(base),
                               "LOG": str(log), **env})
    return proc.returncode, proc.stderr, log.read_text().splitlines()


def test_setup_sh_finds_the_first_python_that_runs(tmp_path):
    _fake_pythons(tmp_path, {"python3.11": None, "python3.12": "3.12", "python3.13": "3.13"})
    rc, err, calls = _run_setup(tmp_path)
    assert "python3.12 -m venv .venv" in calls, (calls, err)          # python3.11 fails to run: the next one
    assert not any(c.startswith("python3.13") for c in calls), calls
    assert rc == 3, (rc, err)      # the fake venv's python refuses the install step: nothing was installed
    assert calls[-1].endswith(" 3.12 ranges"), calls[-1]             # 3.12: setup.cfg's ranges, not the lock


def test_setup_sh_refuses_a_python_outside_3_11_to_3_13(tmp_path):
    _fake_pythons(tmp_path / "old", {"python3.10": "3.10"})
    rc, err, _ = _run_setup(tmp_path / "old", PYTHON="python3.10")
    assert rc == 2 and "Python 3.10 (python3.10): 3.11, 3.12 or 3.13 required" in err, (rc, err)
    assert not (tmp_path / "old" / "repo" / ".venv").exists()
    _fake_pythons(tmp_path / "none", {"python3.11": None})
    rc, err, _ = _run_setup(tmp_path / "none")
    assert rc == 2 and "no python3.11, python3.12 or python3.13 runs here" in err, (rc, err)


def test_setup_sh_refuses_to_mix_a_venv_with_another_python(tmp_path):
    _fake_pythons(tmp_path, {"python3.11": "3.11", "python3.12": "3.12"})
    _, _, calls = _run_setup(tmp_path)                                 # makes .venv of the "3.11"
    assert calls[-1].endswith(" 3.11 lock"), calls[-1]               # 3.11: the exact lock
    assert (tmp_path / "repo" / ".venv" / "bin" / "python").exists()
    rc, err, calls = _run_setup(tmp_path, PYTHON="python3.12")
    assert rc == 2 and ".venv has Python 3.11, not 3.12 (python3.12): remove .venv" in err, (rc, err)
    assert not any("venv" in c and c.startswith("python3.12") for c in calls), calls
