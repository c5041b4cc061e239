"""``maxk_jax.execution.client`` keeps the names it used to define importable, as the very same objects."""
import maxk_jax.execution as execution
from maxk_jax.execution import client, embedded, executor, factory, http_client


def test_client_reexports_the_backends_unchanged() -> None:
    assert client.EmbeddedExecutor is embedded.EmbeddedExecutor is execution.EmbeddedExecutor
    assert client.HttpExecutor is http_client.HttpExecutor is execution.HttpExecutor
    assert client.Executor is executor.Executor is execution.Executor
    assert client.make_executor is factory.make_executor is execution.make_executor
    assert client.sandbox_error_result is executor.sandbox_error_result
    assert sorted(client.__all__) == sorted(name for name in vars(client) if not name.startswith("_"))
