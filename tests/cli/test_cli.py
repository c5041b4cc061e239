"""maxk_jax.cli: one line and exit status 2 per user error, --help exits 0, tracebacks only for
internal errors, a quiet console unless --log_level / --verbosity ask for more."""
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = textwrap.dedent('''
    import logging as std_logging
    from absl import app, flags, logging
    from maxk_jax import cli

    flags.DEFINE_integer("n", 1, "An int flag of the test program.")
    flags.DEFINE_string("mode", "ok", "What main does: ok, user, usage, checked, internal, log.")
    flags.DEFINE_string("name", None, "A required flag of the test program.")
    flags.mark_flags_as_required(["name"])

    def main(argv):
        mode = flags.FLAGS.mode
        if mode == "user":
            raise cli.UserError("file 'x.jsonl' is empty\\n(second line)")
        if mode == "usage":
            raise app.UsageError("--n must be >= 2, got 1")
        if mode == "checked":
            with cli.user_errors():
                open("/nonexistent/dir/file")
        if mode == "internal":
            raise ValueError("a bug")
        if mode == "interrupt":
            cli.on_interrupt(lambda: "checkpoints of steps [2] in 'out'; continue with --resume")
            raise KeyboardInterrupt
        if mode == "interrupt_bare":
            raise KeyboardInterrupt
        if mode == "wait":
            import time
            cli.on_interrupt("the table so far in 'out.md'")
            print("waiting", flush=True)
            time.sleep(60)
        if mode == "log":
            logging.info("program info")
            logging.warning("program warning")
            std_logging.getLogger("orbax.checkpoint").warning("library warning")
            std_logging.getLogger("jax._src.xla_bridge").info("library info")
        print("done")

    cli.run_main(main)
''')


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "prog.py"
    path.write_text(SCRIPT)
    return str(path)


def run(program, *args):
    args = tuple(a for a in args if a != "NO_NAME") if "NO_NAME" in args else ("--name=x", *args)
    return subprocess.run([sys.executable, program, *args], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": ROOT})


def test_help_exits_zero(program):
    for flag in ("--help", "--helpshort"):
        out = run(program, flag)
        assert out.returncode == 0 and "--mode" in out.stdout, out.stderr


@pytest.mark.parametrize("args, message", [
    (["--n=abc"], "error: flag --n=abc: invalid literal for int() with base 10: 'abc'"),
    (["--bogus=1"], "error: Unknown command line flag 'bogus'"),
    (["--mode=user"], "error: file 'x.jsonl' is empty (second line)"),
    (["--mode=usage"], "error: --n must be >= 2, got 1"),
    (["--mode=checked"], "error: /nonexistent/dir/file: No such file or directory"),
    (["NO_NAME"], "error: flag --name=None: Flag --name must have a value other than None."),
])
def test_user_errors_are_one_line_with_status_2(program, args, message):
    out = run(program, *args)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stderr.splitlines() == [f"prog: {message}"], out.stderr
    assert out.stdout == ""   # no help text


def test_internal_errors_keep_their_traceback(program):
    out = run(program, "--mode=internal")
    assert out.returncode == 1 and "Traceback" in out.stderr and "ValueError: a bug" in out.stderr


def test_console_is_quiet_unless_asked(program):
    out = run(program, "--mode=log")
    assert out.returncode == 0 and out.stdout == "done\n"
    assert "program warning" in out.stderr
    for hidden in ("program info", "library warning", "library info"):
        assert hidden not in out.stderr, out.stderr
    for flag in ("--log_level=info", "--verbosity=0"):
        out = run(program, "--mode=log", flag)
        for shown in ("program info", "program warning", "library warning", "library info"):
            assert shown in out.stderr, (flag, out.stderr)
    out = run(program, "--mode=log", "--log_level=error")
    assert "warning" not in out.stderr


@pytest.mark.parametrize("mode,saved", [
    ("interrupt", "checkpoints of steps [2] in 'out'; continue with --resume"),
    ("interrupt_bare", "nothing resumable was saved (files written so far may be incomplete)")])
def test_ctrl_c_is_one_line_saying_what_was_saved_with_status_130(program, mode, saved):
    out = run(program, f"--mode={mode}")
    assert out.returncode == 130, out.stderr
    assert out.stderr.splitlines() == [f"prog: interrupted: {saved}"], out.stderr


def test_sigint_of_a_running_program(program):
    import signal

    proc = subprocess.Popen([sys.executable, program, "--name=x", "--mode=wait"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": ROOT})
    try:
        assert proc.stdout.readline().strip() == "waiting"   # main is running
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130 and err.splitlines() == ["prog: interrupted: the table so far in 'out.md'"], err
