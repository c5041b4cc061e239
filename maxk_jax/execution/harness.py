"""Child side of one sandboxed test (stdlib only; runs inside the sandbox under /usr/bin/python3).

The worker forks, and the child calls :func:`run_test`, which never returns: it reads a per-run
nonce from a pipe (closed before any program code runs), wires the test's stdin/stdout/stderr,
applies rlimits, runs the program and reports one record ``"\\n<nonce> <json>\\n"`` on
``RESULT_FD``. Only records carrying the nonce are believed, so a program cannot forge a verdict
by printing, exiting early, or writing to the result fd. Values the program produces (function
return values, operands of assert comparisons) are *normalised* with the C methods of the builtin
base types — captured before program code runs — so a custom ``__eq__``/``__bool__`` or a
monkeypatched builtin cannot make a wrong value compare equal.

Assert mode does not run the tests in the program's interpreter (anything there -- the nonce,
the guards -- is reachable with ``gc``/``ctypes``): :mod:`harness_assert` runs the program in a
separate forked process and the test code in this pristine one, calling the program's functions
over a pipe with plain values.
"""
import ast
import atexit
import builtins
import ctypes
import io
import json
import os
import resource
import signal
import sys
import traceback
import types
from typing import Any

RESULT_FD = 63          # inside the default 64-entry fd table; open() never hands it out
CMP_NAME = "__maxk_compare__"
TRUTH_NAME = "__maxk_truth__"
_PR_SET_DUMPABLE = 4
_IMMUTABLE_TYPE = 1 << 8

# References captured at import (before any program code runs in the forked child).
_write, _exit, _type, _isinstance, _str = os.write, os._exit, type, isinstance, str
_dict_items, _list_copy, _set_copy, _frozenset_copy = dict.items, list.copy, set.copy, frozenset.copy
_tuple_slice, _int_int, _float_float, _str_str = tuple.__getitem__, int.__int__, float.__float__, str.__str__
_bytes_slice, _complex_new = bytes.__getitem__, complex.__new__
_encode_str = json.encoder.encode_basestring_ascii
_set_int_digits, _get_int_digits = sys.set_int_max_str_digits, sys.get_int_max_str_digits
_DEFAULT_INT_DIGITS = sys.int_info.default_max_str_digits
_LEAF_IDS = frozenset(id(t) for t in (type(None), bool, int, float, complex, str, bytes, range, type))
try:
    _PRCTL = ctypes.CDLL(None).prctl      # resolved once in the worker, inherited by every fork
except (OSError, AttributeError):  # pragma: no cover - no libc handle
    _PRCTL = None
_OPS = {
    "Eq": lambda a, b: a == b, "NotEq": lambda a, b: a != b, "Lt": lambda a, b: a < b,
    "LtE": lambda a, b: a <= b, "Gt": lambda a, b: a > b, "GtE": lambda a, b: a >= b,
    "In": lambda a, b: a in b, "NotIn": lambda a, b: a not in b,
    "Is": lambda a, b: a is b, "IsNot": lambda a, b: a is not b,
}
_LEAF_NAMES = frozenset([("decimal", "Decimal"), ("datetime", "date"), ("datetime", "time"),
                         ("datetime", "datetime"), ("datetime", "timedelta")])
_TYPE_FLAGS = type.__dict__["__flags__"].__get__
_TYPE_MODULE = type.__dict__["__module__"].__get__
_TYPE_QUALNAME = type.__dict__["__qualname__"].__get__


def _trusted_leaf(cls: type) -> bool:
    """Immutable C types (Decimal, datetime) whose comparison does not look inside other objects.

    Read through ``type``'s own descriptors, so a metaclass cannot fake the flags or the name;
    classes defined in Python are never immutable types.
    """
    return bool(_TYPE_FLAGS(cls) & _IMMUTABLE_TYPE) and (_TYPE_MODULE(cls), _TYPE_QUALNAME(cls)) in _LEAF_NAMES


class NotPlainError(Exception):
    """A value is not built from builtin types, so its comparison cannot be trusted."""


def normalise(value: Any, _depth: int = 0) -> Any:
    """Rebuild ``value`` from exact builtin types using the base types' own C methods.

    Subclasses of int/float/str/bytes/tuple/list/dict/set/frozenset lose any overridden dunders
    (an always-true ``__eq__`` has nothing to hook into); other classes raise NotPlainError.
    """
    if _depth > 400:
        raise NotPlainError("value nested deeper than 400 levels")
    cls = _type(value)
    if id(cls) in _LEAF_IDS or _trusted_leaf(cls):
        return value
    if cls is list or _isinstance(value, list):
        return [normalise(item, _depth + 1) for item in _list_copy(value)]
    if cls is tuple or _isinstance(value, tuple):
        return tuple([normalise(item, _depth + 1) for item in _tuple_slice(value, slice(None))])
    if cls is dict or _isinstance(value, dict):
        return {normalise(k, _depth + 1): normalise(v, _depth + 1) for k, v in _dict_items(value)}
    if _isinstance(value, set):
        return {normalise(item, _depth + 1) for item in _set_copy(value)}
    if _isinstance(value, frozenset):
        return frozenset([normalise(item, _depth + 1) for item in _frozenset_copy(value)])
    if _isinstance(value, int):
        return _int_int(value)
    if _isinstance(value, float):
        return _float_float(value)
    if _isinstance(value, str):
        return _str_str(value)
    if _isinstance(value, bytes):
        return _bytes_slice(value, slice(None))
    if _isinstance(value, complex):
        return _complex_new(complex, value.real, value.imag)
    raise NotPlainError(f"value of type {cls.__name__!s} is not a builtin value")


def safe_compare(ops: tuple, *operands) -> bool:
    """Evaluate a (chained) comparison on normalised operands; installed for assert statements."""
    values = [normalise(v) for v in operands]
    for op, left, right in zip(ops, values, values[1:]):
        if not _OPS[op](left, right):
            return False
    return True


def safe_truth(value: Any) -> bool:
    """Truth value of a normalised value (a custom ``__bool__`` cannot make an assert pass)."""
    return bool(normalise(value))


class _AssertGuard(ast.NodeTransformer):
    """Route the comparisons and truth tests inside ``assert`` statements through the guards."""

    def visit_Assert(self, node: ast.Assert) -> ast.Assert:
        """Guard the assert's test expression."""
        node.test = _truth_call(_CompareRewriter().visit(node.test))
        return node


class _CompareRewriter(ast.NodeTransformer):
    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        """``a op b ...`` -> ``__maxk_compare__(ops, a, b, ...)`` unless every op is ``is``/``is not``."""
        self.generic_visit(node)
        ops = tuple(type(op).__name__ for op in node.ops)
        if all(op in ("Is", "IsNot") for op in ops):
            return node
        call = ast.Call(func=ast.Name(id=CMP_NAME, ctx=ast.Load()),
                        args=[ast.Constant(value=ops), node.left, *node.comparators], keywords=[])
        return ast.copy_location(call, node)

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        """``a and b`` -> truth-guard every operand."""
        self.generic_visit(node)
        node.values = [_truth_call(v) for v in node.values]
        return node

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        """``not a`` -> truth-guard the operand."""
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            node.operand = _truth_call(node.operand)
        return node


def _truth_call(expr: ast.AST) -> ast.AST:
    call = ast.Call(func=ast.Name(id=TRUTH_NAME, ctx=ast.Load()), args=[expr], keywords=[])
    return ast.copy_location(call, expr)


def compile_tests(source: bytes) -> types.CodeType:
    """Compile assert-mode test code with guarded asserts (raises SyntaxError etc.)."""
    tree = _AssertGuard().visit(ast.parse(source, "tests.py", "exec"))
    return compile(ast.fix_missing_locations(tree), "tests.py", "exec", dont_inherit=True)


def dumps(value: Any) -> str:
    """JSON text of a normalised value (tuples/sets become lists, NaN/Infinity allowed)."""
    out = []
    previous = _get_int_digits()
    _set_int_digits(0)
    try:
        _dump(normalise(value), out)
    finally:
        _set_int_digits(previous)
    return "".join(out)


def _dump(value, out: list) -> None:
    cls = _type(value)
    if value is None:
        out.append("null")
    elif cls is bool:
        out.append("true" if value else "false")
    elif cls is int:
        out.append(int.__repr__(value))
    elif cls is float:
        out.append(float.__repr__(value) if value == value and value not in (float("inf"), float("-inf"))
                   else ("NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")))
    elif cls is str:
        out.append(_encode_str(value))
    elif cls in (list, tuple, set, frozenset):
        items = list(value)
        if cls in (set, frozenset):
            try:
                items = sorted(items)
            except TypeError:
                raise NotPlainError("set with unorderable elements") from None
        out.append("[")
        for i, item in enumerate(items):
            if i:
                out.append(",")
            _dump(item, out)
        out.append("]")
    elif cls is dict:
        out.append("{")
        for i, (key, item) in enumerate(value.items()):
            if _type(key) is not str:
                raise NotPlainError(f"dict key of type {_type(key).__name__} is not a string")
            out.append(("," if i else "") + _encode_str(key) + ":")
            _dump(item, out)
        out.append("}")
    else:
        raise NotPlainError(f"value of type {cls.__name__} has no JSON form")


class Child:
    """State of the forked child between setup and the final report."""

    def __init__(self, job: dict, blobs: dict, nonce: bytes):
        self.job, self.blobs, self.nonce = job, blobs, nonce
        self.builtins_snapshot = BUILTINS_SNAPSHOT

    def report(self, kind: str, **fields: Any) -> None:
        """Write a ``{"k": kind, ...}`` record (builtins restored first; own JSON encoder)."""
        builtins.__dict__.clear()
        builtins.__dict__.update(self.builtins_snapshot)
        fields["k"] = kind
        self.report_raw(dumps(fields).encode("ascii"))

    def report_raw(self, body: bytes) -> None:
        """Write one nonce-tagged record line to RESULT_FD."""
        data = memoryview(b"\n" + self.nonce + b" " + body + b"\n")
        while data:
            data = data[_write(RESULT_FD, data):]

    def restore_builtins(self, namespace: dict) -> None:
        """Undo monkeypatched builtins and tracing before harness code or test code runs."""
        builtins.__dict__.clear()
        builtins.__dict__.update(self.builtins_snapshot)
        namespace["__builtins__"] = builtins
        sys.settrace(None)
        sys.setprofile(None)


def describe(err: BaseException) -> tuple:
    name = _type(err).__name__
    try:
        message = _str(err)[:300]
    except BaseException:  # noqa: BLE001 - the program's __str__ may do anything
        message = "<unprintable>"
    return name, message, _isinstance(err, MemoryError)


def print_exception(err: BaseException) -> None:
    try:
        traceback.print_exception(_type(err), err, err.__traceback__, limit=50)
    except BaseException:  # noqa: BLE001
        pass


def exit_code(err: SystemExit) -> int:
    code = err.code
    if code is None:
        return 0
    if _isinstance(code, int):
        return _int_int(code) & 0xFF
    try:
        sys.stderr.write(_str(code) + "\n")
    except BaseException:  # noqa: BLE001
        pass
    return 1


def _finish_interpreter(code: int) -> int:
    """What CPython does at exit: join non-daemon threads, run atexit, flush stdio."""
    threading = sys.modules.get("threading")
    if threading is not None:
        try:
            threading._shutdown()
        except BaseException:  # noqa: BLE001
            pass
    try:
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001
        pass
    for stream in {id(s): s for s in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)}.values():
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001
            code = 120
    return code


def prepare_worker() -> None:
    """Once in the worker, before any fork: the state every child starts from.

    The text streams are built here on fds 0/1/2 (the worker keeps /dev/null there and never
    writes to them), so a child only swaps the fds underneath; SIGPIPE is ignored as CPython
    does. SIGINT stays at SIG_DFL: a Python handler in the worker (PID 1) would let the program
    signal it, so a program that sends itself SIGINT dies of it instead of KeyboardInterrupt.
    """
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    sys.stdin = sys.__stdin__ = io.open(0, "r", encoding="utf-8", errors="strict", newline="\n", closefd=False)
    sys.stdout = sys.__stdout__ = io.open(1, "w", encoding="utf-8", errors="strict", newline="\n", closefd=False)
    sys.stderr = sys.__stderr__ = io.open(2, "w", encoding="utf-8", errors="backslashreplace", newline="\n",
                                          closefd=False, buffering=1)


def setup_process(job: dict, fds: dict, keep: tuple = (), dumpable: bool = True) -> None:
    """Wire fds 0/1/2 (and RESULT_FD if ``fds`` has ``result``), close every other fd but ``keep``,
    chdir, apply the rlimits. ``dumpable=False`` keeps /proc/self and ptrace closed to same-uid peers."""
    targets = [(fds["stdin"], 0), (fds["stdout"], 1), (fds["stderr"], 2)]
    if "result" in fds:
        targets.append((fds["result"], RESULT_FD))
    for fd, target in targets:
        os.dup2(fd, target, inheritable=target != RESULT_FD)
    low = 3
    for fd in sorted(set(keep) | ({RESULT_FD} if "result" in fds else set())):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 16)
    os.chdir(job["cwd"])
    if _PRCTL is not None and dumpable:
        _PRCTL(_PR_SET_DUMPABLE, 1, 0, 0, 0)
    sys.modules.pop("harness", None)
    sys.argv = list(job.get("argv") or ["main.py"])
    sys.path[:] = [p for p in sys.path if p != job.get("harness_dir")]
    limits = job["limits"]
    cpu = int(limits["cpu_s"]) + (0 if float(limits["cpu_s"]).is_integer() else 1)
    # RLIMIT_FSIZE one byte above the larger of the output and scratch limits (stdout/stderr are
    # pipes the worker counts, which RLIMIT_FSIZE does not see): a scratch file is bounded by the
    # scratch tmpfs (ENOSPC), not by this; a memfd beyond it dies of SIGXFSZ (memory).
    fsize = max(int(limits["output_bytes"]), int(limits.get("scratch_bytes") or 0)) + 1
    settings = [(resource.RLIMIT_CPU, (cpu, cpu + 1)),
                (resource.RLIMIT_FSIZE, (fsize,) * 2),
                (resource.RLIMIT_NOFILE, (limits["nofile"],) * 2),
                (resource.RLIMIT_CORE, (0, 0))]
    if limits.get("memory_bytes"):          # None when the slot's cgroup limits memory instead
        settings.append((resource.RLIMIT_AS, (limits["memory_bytes"],) * 2))
    for res, value in settings:
        resource.setrlimit(res, value)
    if limits.get("nproc"):
        resource.setrlimit(resource.RLIMIT_NPROC, (limits["nproc"],) * 2)


def read_nonce(fd: int) -> bytes:
    """Read the 32-byte run nonce from the worker's pipe and close it."""
    nonce = b""
    while len(nonce) < 32:
        chunk = os.read(fd, 32 - len(nonce))
        if not chunk:
            break
        nonce += chunk
    os.close(fd)
    return nonce


def run_test(job: dict, blobs: dict, fds: dict) -> None:
    """Run one test in the freshly forked child and ``os._exit``; never returns.

    ``job``: worker header (mode, limits, cwd, argv, entry_point, args_json); ``blobs``: code and
    test_code bytes; ``fds``: open fds ``nonce`` (pipe), ``stdin``/``stdout``/``stderr``/``result``.
    """
    if job["mode"] == "assert":
        import harness_assert  # pre-imported by the worker; never returns

        harness_assert.run_split(job, blobs, fds)
        _exit(121)
    try:
        nonce = read_nonce(fds["nonce"])
        setup_process(job, fds)
        child = Child(job, blobs, nonce)
    except BaseException:  # noqa: BLE001 - nothing else can report this
        _exit(121)
    mode = job["mode"]
    code = compile_program(child.report, blobs["code"])
    namespace = program_namespace(mode)
    if mode == "stdio":
        _run_stdio(child, code, namespace)
    elif mode == "function":
        _set_int_digits(0)
        args = json.loads(job["args_json"])
        _set_int_digits(_DEFAULT_INT_DIGITS)
        _run_function(child, code, namespace, args, job["entry_point"])
    _exit(0)


def compile_program(report, source: bytes) -> types.CodeType:
    """Compile the program; on failure ``report`` a ``ce`` (or out-of-memory ``exc``) record and exit."""
    try:
        return compile(source, "main.py", "exec", dont_inherit=True)
    except MemoryError:
        report("exc", exc="MemoryError", msg="out of memory while compiling", mem=True)
        _exit(1)
    except BaseException as err:  # noqa: BLE001 - SyntaxError, ValueError (NUL bytes), RecursionError ...
        report("ce", msg=f"{_type(err).__name__}: {err}"[:500])
        _exit(0)


def program_namespace(mode: str) -> dict:
    """The globals of a fresh ``__main__`` (stdio) or ``solution`` module, installed as ``__main__``."""
    namespace = {"__name__": "__main__" if mode == "stdio" else "solution", "__builtins__": builtins,
                 "__doc__": None, "__package__": None, "__spec__": None, "__loader__": None}
    module = types.ModuleType(namespace["__name__"])
    module.__dict__.update(namespace)
    sys.modules["__main__"] = module
    return module.__dict__


def _run_stdio(child: Child, code, namespace: dict) -> None:
    exc = mem = None
    try:
        exec(code, namespace)
        status = 0
    except SystemExit as err:
        status = exit_code(err)
    except BaseException as err:  # noqa: BLE001
        exc, _, mem = describe(err)
        print_exception(err)
        status = 1
    status = _finish_interpreter(status)
    child.report("exit", code=status, exc=exc, mem=mem)
    _exit(status)


def _run_program(child: Child, code, namespace: dict) -> None:
    try:
        exec(code, namespace)
    except SystemExit as err:
        child.report("early_exit", code=exit_code(err), where="module")
        _exit(0)
    except BaseException as err:  # noqa: BLE001
        name, message, mem = describe(err)
        print_exception(err)
        child.report("exc", exc=name, msg=message, mem=mem, where="module")
        _exit(1)


def _run_function(child: Child, code, namespace: dict, args: list, entry_point: str) -> None:
    _run_program(child, code, namespace)
    fn = dict.get(namespace, entry_point)
    if not callable(fn):
        child.report("noentry", msg=f"entry point {entry_point!r} is not defined as a callable")
        _exit(1)
    try:
        value = fn(*args)
    except SystemExit as err:
        child.report("early_exit", code=exit_code(err), where="call")
        _exit(0)
    except BaseException as err:  # noqa: BLE001
        name, message, mem = describe(err)
        print_exception(err)
        child.report("exc", exc=name, msg=message, mem=mem, where="call")
        _exit(1)
    child.restore_builtins(namespace)
    try:
        text = dumps(value)
    except (NotPlainError, RecursionError) as err:
        child.report("unser", msg=_str(err)[:300])
        _exit(0)
    child.report_raw(b'{"k":"value","v":' + text.encode("ascii") + b"}")


BUILTINS_SNAPSHOT = dict(builtins.__dict__)
