"""Assert mode with the tests outside the program's interpreter (stdlib only; runs in the sandbox).

In one interpreter, test code and program code can reach each other: with ``gc`` a program finds
the harness object, its nonce and its report method, or patches the comparison guards, and a
wrong program "passes". So the test child splits in two before it learns the nonce:

* **P** (program): forked first; closes the nonce pipe and the result fd, runs the program as
  module ``solution``, then serves calls over a pipe -- ``lookup`` names, ``call`` a function
  with plain arguments -- answering with plain values (normalised, pickled).
* **T** (tests): this process, never dumpable (P, same uid, cannot ptrace it or open its
  /proc/fds); reads the nonce, runs the guarded test code with the program's names bound to
  proxies (functions), copies (plain values) or fresh imports (modules), and writes the only
  nonce-tagged record. P can only answer calls -- the same power as computing the answers.

P's answers are unpickled with every global lookup refused (only builtin containers and scalars
can appear), then normalised again. A program that dies, exits or garbles the channel makes T
die the same way or report a failure (never "done"). Differences from one interpreter: return
values must be plain data (an instance of the program's class is WA), arguments are copies (an
in-place mutation is not seen by the tests), exceptions come back as the builtin type of the same
name (else ``Exception``), and a program's global that shadows a builtin (``len``, ``abs``) is not
seen by the tests.
"""
import ast
import builtins
import importlib
import io
import os
import pickle
import signal
import struct
import types
from typing import Any, Callable

try:
    import harness
except ImportError:  # imported as part of the package (tests outside the sandbox)
    from maxk_jax.execution import harness

_LEN = struct.Struct(">Q")
MAX_MESSAGE_BYTES = 1 << 30
_exit, _type, _isinstance, _str = os._exit, type, isinstance, str


class ChannelError(Exception):
    """The program's process sent something that is not a well-formed message."""


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) == ("builtins", "complex"):
            return complex
        raise pickle.UnpicklingError(f"global {module}.{name} refused")


def loads_plain(data: bytes) -> Any:
    """Unpickle data that may only contain builtin containers and scalars."""
    return _PlainUnpickler(io.BytesIO(data)).load()


def send(fd: int, message: Any) -> None:
    """Write one length-prefixed pickle."""
    body = pickle.dumps(message, protocol=5)
    view = memoryview(_LEN.pack(len(body)) + body)
    while view:
        view = view[os.write(fd, view):]


def _read_exact(fd: int, size: int) -> bytes | None:
    chunks, remaining = [], size
    while remaining:
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def receive(fd: int) -> Any:
    """One message, or None at end of stream; ChannelError on garbage."""
    head = _read_exact(fd, _LEN.size)
    if head is None:
        return None
    (size,) = _LEN.unpack(head)
    if size > MAX_MESSAGE_BYTES:
        raise ChannelError(f"message of {size} bytes")
    body = _read_exact(fd, size)
    if body is None:
        return None
    try:
        return loads_plain(body)
    except Exception as err:  # noqa: BLE001 - anything the unpickler raises on hostile bytes
        raise ChannelError(f"unreadable message: {_type(err).__name__}") from None


def free_names(source: bytes) -> list:
    """Names the test code reads that the program may define (builtins excluded: a program's
    ``len = lambda v: 3`` must not reach the tests)."""
    tree = ast.parse(source, "tests.py", "exec")
    return sorted({node.id for node in ast.walk(tree) if _isinstance(node, ast.Name)
                   and _isinstance(node.ctx, ast.Load) and not node.id.startswith("__")
                   and node.id not in harness.BUILTINS_SNAPSHOT})


# --- P: the program's process --------------------------------------------------------------------
def _plain_bytes(value) -> bytes:
    return pickle.dumps(harness.normalise(value), protocol=5)


def _describe_name(value):
    if _isinstance(value, types.ModuleType):
        return ("module", value.__name__)
    if callable(value):
        return ("call",)
    try:
        return ("value", _plain_bytes(value))
    except BaseException:  # noqa: BLE001 - not plain: the tests cannot see it
        return None


def _serve_program(job: dict, blobs: dict, requests: int, replies: int) -> None:
    code = harness.compile_program(lambda kind, **f: send(replies, (kind, f)), blobs["code"])
    namespace = harness.program_namespace("function")
    try:
        exec(code, namespace)
    except SystemExit as err:
        send(replies, ("early_exit", {"code": harness.exit_code(err), "where": "module"}))
        _exit(0)
    except BaseException as err:  # noqa: BLE001
        name, message, mem = harness.describe(err)
        harness.print_exception(err)
        send(replies, ("exc", {"exc": name, "msg": message, "mem": mem, "where": "module"}))
        _exit(1)
    builtins.__dict__.clear()           # as in one interpreter: the tests see unpatched builtins
    builtins.__dict__.update(harness.BUILTINS_SNAPSHOT)
    while True:
        message = receive(requests)
        if message is None:
            _exit(0)
        if message[0] == "lookup":
            found = {}
            for name in message[1]:
                if name in namespace:
                    kind = _describe_name(namespace[name])
                    if kind is not None:
                        found[name] = kind
            send(replies, ("names", found))
            continue
        _, name, args, kwargs = message
        try:
            value = namespace[name](*args, **kwargs)
        except SystemExit as err:
            send(replies, ("exit", harness.exit_code(err)))
            continue
        except BaseException as err:  # noqa: BLE001
            exc, text, mem = harness.describe(err)
            harness.print_exception(err)
            send(replies, ("raise", exc, text, mem))
            continue
        try:
            body = _plain_bytes(value)
        except BaseException as err:  # noqa: BLE001 - NotPlainError, RecursionError, pickling errors
            send(replies, ("unser", _str(err)[:300]))
            continue
        send(replies, ("value", body))


# --- T: the tests' process -------------------------------------------------------------------------
class _Program:
    """T's handle on P: request/reply pipes; P's death is mirrored by T."""

    def __init__(self, pid: int, requests: int, replies: int):
        self.pid, self.requests, self.replies = pid, requests, replies

    def mirror_death(self) -> None:
        """P ended without answering: reap it and end T the same way (signal or exit status)."""
        try:
            _, status = os.waitpid(self.pid, 0)
        except ChildProcessError:
            _exit(1)
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
            _exit(128 + sig)
        _exit(os.WEXITSTATUS(status))

    def ask(self, message: tuple) -> tuple:
        """Send a request, return P's reply (mirrors P's death on end of stream)."""
        try:
            send(self.requests, message)
        except BrokenPipeError:
            self.mirror_death()
        reply = receive(self.replies)
        if reply is None:
            self.mirror_death()
        if not _isinstance(reply, tuple) or not reply:
            raise ChannelError("malformed reply")
        return reply

    def stop(self) -> None:
        """Kill and reap P (its CPU time then counts for this test)."""
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass

    def proxy(self, name: str) -> Callable:
        """A function that calls P's ``name`` with plain copies of the arguments."""
        def call(*args: Any, **kwargs: Any) -> Any:
            reply = self.ask(("call", name, harness.normalise(args), harness.normalise(kwargs)))
            kind = reply[0]
            if kind == "value":
                return harness.normalise(loads_plain(reply[1]))
            if kind == "raise":
                exc_type = getattr(builtins, _str(reply[1]), None)
                if not (_isinstance(exc_type, type) and issubclass(exc_type, Exception)):
                    exc_type = Exception
                raise exc_type(f"{reply[1]}: {reply[2]}")
            if kind == "exit":
                raise _ProgramExit(reply[1])
            if kind == "unser":
                raise harness.NotPlainError(f"return value is not a plain value: {reply[1]}")
            raise ChannelError(f"unexpected reply {kind!r}")
        call.__name__ = call.__qualname__ = name
        return call


class _ProgramExit(BaseException):
    """The program called exit() inside a function the tests called."""


def _test_namespace(program: _Program, names: dict) -> dict:
    namespace = {"__name__": "tests", "__builtins__": builtins}
    for name, kind in names.items():
        if not (_isinstance(name, str) and _isinstance(kind, tuple) and kind):
            raise ChannelError("malformed name table")
        if name in harness.BUILTINS_SNAPSHOT or name.startswith("__"):
            continue                    # only names T asked for, never builtins or dunders
        if kind[0] == "call":
            namespace[name] = program.proxy(name)
        elif kind[0] == "value":
            namespace[name] = harness.normalise(loads_plain(kind[1]))
        elif kind[0] == "module" and _isinstance(kind[1], str):
            try:
                namespace[name] = importlib.import_module(kind[1])
            except BaseException:  # noqa: BLE001 - a module the program made up: leave the name unbound
                pass
    namespace[harness.CMP_NAME], namespace[harness.TRUTH_NAME] = harness.safe_compare, harness.safe_truth
    return namespace


def run_split(job: dict, blobs: dict, fds: dict) -> None:
    """Assert-mode test in two processes (module doc); never returns."""
    try:
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        pid = os.fork()
    except BaseException:  # noqa: BLE001
        _exit(121)
    if pid == 0:  # P
        try:
            for fd in (fds["nonce"], fds["result"], req_w, rep_r):
                os.close(fd)
            harness.setup_process(job, {k: fds[k] for k in ("stdin", "stdout", "stderr")}, keep=(req_r, rep_w))
            _serve_program(job, blobs, req_r, rep_w)
        finally:
            _exit(121)
    try:
        os.close(req_r)
        os.close(rep_w)
        nonce = harness.read_nonce(fds["nonce"])
        harness.setup_process(job, fds, keep=(req_w, rep_r), dumpable=False)
        child = harness.Child(job, blobs, nonce)
        program = _Program(pid, req_w, rep_r)
    except BaseException:  # noqa: BLE001
        _exit(121)
    try:
        test_code = harness.compile_tests(blobs["test_code"])
        names = free_names(blobs["test_code"])
    except BaseException as err:  # noqa: BLE001
        program.stop()
        child.report("tce", msg=f"{_type(err).__name__}: {err}"[:500])
        _exit(0)
    _run_tests(child, program, names, test_code)


def _run_tests(child: Any, program: _Program, names: list, test_code: types.CodeType) -> None:
    try:
        reply = program.ask(("lookup", names))
        if reply[0] != "names":             # the program failed before its functions existed
            program.stop()
            fields = reply[1] if len(reply) > 1 and _isinstance(reply[1], dict) else {}
            if reply[0] in ("ce", "exc", "early_exit"):
                child.report(reply[0], **{k: v for k, v in fields.items()
                                          if k in ("msg", "exc", "mem", "code", "where")})
                _exit(1 if reply[0] == "exc" else 0)
            raise ChannelError(f"unexpected reply {reply[0]!r}")
        namespace = _test_namespace(program, reply[1] if _isinstance(reply[1], dict) else {})
    except (ChannelError, harness.NotPlainError) as err:
        program.stop()
        child.report("assert", msg=f"the program broke the test channel: {err}"[:300])
        _exit(0)
    try:
        exec(test_code, namespace)
    except _ProgramExit as err:
        program.stop()
        child.report("early_exit", code=err.args[0] if err.args and _isinstance(err.args[0], int) else 1, where="call")
        _exit(0)
    except (AssertionError, harness.NotPlainError, ChannelError) as err:
        program.stop()
        _, message, _ = harness.describe(err)
        child.report("assert", msg=f"{_type(err).__name__}: {message}")
        _exit(0)
    except BaseException as err:  # noqa: BLE001
        program.stop()
        name, message, mem = harness.describe(err)
        harness.print_exception(err)
        child.report("exc", exc=name, msg=message, mem=mem, where="tests")
        _exit(1)
    program.stop()
    child.report("done")
    _exit(0)
