"""Shared helpers of the RL tests: tiny stdio problems and a laptop-scale RunConfig."""
from maxk_jax.data import Problem, StdioCase, StdioTests
from maxk_jax.rl.run_config import RunConfig
from maxk_jax.cli.fields import replace_fields
from maxk_jax.sampling import SamplerSettings


def echo_problem(i: int) -> Problem:
    """A tiny stdio problem: print the integer read (3 tests, partial credit possible)."""
    cases = (StdioCase("0", "0"), StdioCase("1", "1"), StdioCase(str(5 + i), str(5 + i)))
    return Problem(id=f"fixture/{i}", source="fixture", prompt=f"Read x and print x. ({i})",
                   tests=StdioTests(cases))


WARM_ANSWERS = ("print(input())", "print(0)", "print(1)", "print(int(input())+1)")


def small_config(model_path, problems, out_dir, **changes):
    """A laptop-scale RunConfig (tiny model, CPU) built directly; ``changes``: dotted paths."""
    cfg = replace_fields(RunConfig(), {
        "name": "small", "model.path": model_path, "output_dir": str(out_dir),
        "model.compute_dtype": "float32", "model.remat": False,
        "data.dataset": "", "data.problems": problems, "data.prompt_format": "statement",
        "rollout.prompts": 2, "rollout.sampler": SamplerSettings(n=4, max_new_tokens=12),
        "rollout.executor": "embedded:2", "algo.k": 2, "optim.learning_rate": 1e-3,
        "mesh.data": -1, "mesh.fsdp": 1, "checkpoint.interval": 2, "checkpoint.keep": 2,
        "eval.dataset": "synthetic", "eval.limit": 32, "eval.sampler.max_new_tokens": 64})
    return replace_fields(cfg, changes)


SCORED: list[tuple[str, str, float]] = []   # (problem id, completion, reward) of `recorded_closeness_reward`


def recorded_closeness_reward(problem: Problem, completion: str) -> float:
    """The arithmetic example's graded reward, recording every call in `SCORED` (a
    ``reward:tests.rl.fixtures:recorded_closeness_reward`` spec reaches this module's list)."""
    from maxk_jax.data.arithmetic import closeness_reward

    reward = closeness_reward(problem, completion)
    SCORED.append((problem.id, completion, reward))
    return reward
