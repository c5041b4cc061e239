"""Former home of the executor backends; their names stay importable from here.

New code imports from ``maxk_jax.execution`` (or the backend's own module): the protocol is in
``executor``, the backends in ``embedded``, ``http_client`` and ``sandboxfusion``, the factory in
``factory``. Nothing inside ``maxk_jax.execution`` imports this module.
"""
from maxk_jax.execution.embedded import EmbeddedExecutor
from maxk_jax.execution.executor import Executor, sandbox_error_result
from maxk_jax.execution.factory import make_executor
from maxk_jax.execution.http_client import HttpExecutor

__all__ = ["EmbeddedExecutor", "Executor", "HttpExecutor", "make_executor", "sandbox_error_result"]
