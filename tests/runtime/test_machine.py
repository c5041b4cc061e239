"""maxk_jax.runtime.machine: the host CPU's model name, with a fallback when /proc/cpuinfo cannot be read."""
import platform

from maxk_jax.runtime import machine
from maxk_jax.pipelines import phases


def test_cpu_model_reads_the_model_name_and_falls_back_to_platform(monkeypatch):
    name = machine.cpu_model()
    assert name and name == name.strip() and not name.startswith(":") and "model name" not in name
    assert phases.cpu_model is machine.cpu_model   # the pipelines' records name the same CPU

    def unreadable(*args, **kwargs):
        raise OSError("no /proc/cpuinfo")

    monkeypatch.setattr(machine, "open", unreadable, raising=False)
    assert machine.cpu_model() == (platform.processor() or platform.machine() or "unknown")
