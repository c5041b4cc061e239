"""maxk_jax.planning.simulated_devices: the XLA_FLAGS / JAX_PLATFORMS set-up of the AOT planners."""
import pytest

from maxk_jax.planning.simulated_devices import request_cpu_devices


def test_requests_a_count_unless_one_is_set(monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    request_cpu_devices(8, "--xla_dump_to=/d")
    import os
    assert os.environ["XLA_FLAGS"].split() == ["--xla_force_host_platform_device_count=8", "--xla_dump_to=/d"]
    assert os.environ["JAX_PLATFORMS"] == "cpu"
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
    monkeypatch.setenv("JAX_PLATFORMS", "tpu")
    request_cpu_devices(8)                                   # the caller's count and platform win
    assert os.environ["XLA_FLAGS"] == "--xla_force_host_platform_device_count=4"
    assert os.environ["JAX_PLATFORMS"] == "tpu"
    for bad in (0, -1, True, 2.0):
        with pytest.raises(ValueError, match="count must be an int >= 1"):
            request_cpu_devices(bad)
