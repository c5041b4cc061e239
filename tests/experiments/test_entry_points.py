"""Every entry point under experiments/ (and the judge's ``maxk_jax.execution.serve``) keeps the
command-line contract of `maxk_jax.cli`: ``--help`` exits 0 and lists the program's flags, a bad
flag is one line ``<program>: error: ...`` on stderr with exit status 2.

Each program runs exactly as ``python -m <module>`` does (``runpy`` with ``__name__ == "__main__"``)
in a forked child of one driver process that imported the shared libraries once, so the sweep costs
one import of jax instead of one per program; `test_one_entry_point_in_a_fresh_interpreter` checks
that the forked run agrees with a real ``python -m``."""
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BAD_FLAG = "--no_such_flag_of_any_program=1"


def entry_points() -> list[str]:
    """Modules with a ``__main__`` block: experiments/*.py and the judge service."""
    found = sorted(f"experiments.{p.stem}" for p in (ROOT / "experiments").glob("*.py")
                   if 'if __name__ == "__main__":' in p.read_text(encoding="utf-8"))
    return [*found, "maxk_jax.execution.serve"]


DRIVER = textwrap.dedent('''
    import json, os, runpy, sys, tempfile
    import jax, numpy, ml_collections, absl.flags            # shared imports, paid once
    import maxk_jax.pipelines, maxk_jax.rl.loop, maxk_jax.cli  # (no module here defines flags on import)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot
    for optional in ("torch", "transformers"):               # the benchmarks' baselines (the test extra)
        try:
            __import__(optional)
        except ImportError:
            pass

    def run(module, args):
        out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        pid = os.fork()
        if pid == 0:
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            sys.argv = [module, *args]
            code = 0
            try:
                runpy.run_module(module, run_name="__main__", alter_sys=True)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except ModuleNotFoundError as e:                 # an optional dependency is not installed
                print(f"MISSING {e.name}", file=sys.stderr)
                code = 98
            except BaseException:
                import traceback
                traceback.print_exc()
                code = 99
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        out.seek(0)
        err.seek(0)
        return {"rc": os.waitstatus_to_exitcode(status), "stdout": out.read(), "stderr": err.read()}

    results = {m: {a: run(m, [a]) for a in sys.argv[2:]} for m in sys.argv[1].split(",")}
    print(json.dumps(results))
''')


@pytest.fixture(scope="module")
def sweep():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", DRIVER, ",".join(entry_points()), "--help", BAD_FLAG], cwd=ROOT,
                         capture_output=True, text=True, timeout=900, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _program(module: str) -> str:
    return module.rsplit(".", 1)[-1]


def _result(sweep, module: str, args: str) -> dict:
    res = sweep[module][args]
    if res["rc"] == 98 and res["stderr"].strip().split()[-1] in ("torch", "transformers"):
        pytest.skip(f"{module} needs {res['stderr'].split()[-1]} (the test extra)")
    return res


def test_every_entry_point_is_swept():
    names = entry_points()
    for must in ("experiments.train", "experiments.tiny_pipeline", "experiments.compare_methods",
                 "experiments.staleness_grid", "experiments.evaluate", "experiments.estimator_exactness",
                 "maxk_jax.execution.serve"):
        assert must in names
    assert len(names) >= 20


@pytest.mark.parametrize("module", entry_points())
def test_help_exits_zero_and_lists_the_flags(sweep, module):
    res = _result(sweep, module, "--help")
    assert res["rc"] == 0, res["stderr"][-2000:]
    assert "flags:" in res["stdout"] and "  --" in res["stdout"], res["stdout"][-2000:]


@pytest.mark.parametrize("module", entry_points())
def test_a_bad_flag_is_one_line_with_status_2(sweep, module):
    res = _result(sweep, module, BAD_FLAG)
    lines = res["stderr"].strip().splitlines()
    assert res["rc"] == 2 and len(lines) == 1, res["stderr"][-2000:]
    assert lines[0].startswith(f"{_program(module)}: error: Unknown command line flag 'no_such_flag_of_any_program'")


def test_one_entry_point_in_a_fresh_interpreter(sweep):
    """The forked sweep is faithful: a real ``python -m`` gives the same status and stderr."""
    for args in (["--help"], [BAD_FLAG]):
        out = subprocess.run([sys.executable, "-m", "maxk_jax.execution.serve", *args], cwd=ROOT, capture_output=True,
                             text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
        forked = sweep["maxk_jax.execution.serve"][args[0]]
        assert (out.returncode, out.stderr) == (forked["rc"], forked["stderr"])


def test_evaluate_seed_defaults_to_zero(sweep):
    import re

    help_text = sweep["experiments.evaluate"]["--help"]["stdout"]
    match = re.search(r"--seed: Seed of the sampling key.*?\(default: '(\d+)'\)", help_text, re.S)
    assert match and match.group(1) == "0", help_text[-3000:]


def test_the_groups_table_places_every_program_once_and_follows_the_naming_rule():
    """docs/usage/entry_points.md's table: each experiments/*.py (configs aside) in exactly one group;
    every bench_* under benchmarks and every plan_* under planners, and nothing else there."""
    text = (ROOT / "docs" / "usage" / "entry_points.md").read_text(encoding="utf-8")
    groups = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 3 and cells[1].startswith("`"):
            groups[cells[0].split(" (")[0]] = [name.strip(" `") for name in cells[1].split(",")]
    assert set(groups) == {"paper experiments", "benchmarks", "planners", "tools"}, sorted(groups)
    listed = [name for names in groups.values() for name in names]
    programs = sorted(p.stem for p in (ROOT / "experiments").glob("*.py") if p.stem != "__init__")
    assert sorted(listed) == programs, (sorted(set(programs) - set(listed)), sorted(set(listed) - set(programs)),
                                        sorted(n for n in set(listed) if listed.count(n) > 1))
    assert sorted(groups["benchmarks"]) == [p for p in programs if p.startswith("bench_")]
    assert sorted(groups["planners"]) == [p for p in programs if p.startswith("plan_")]
