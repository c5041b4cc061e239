"""The system-call filter of judged programs: built by libseccomp, denied calls fail with EPERM."""
import dataclasses
import platform

import pytest

from maxk_jax.execution import seccomp
from maxk_jax.execution.embedded import EmbeddedExecutor

LIMITS = {"cpu_s": 1, "wall_s": 2, "memory_mb": 256, "output_mb": 4}
# x86-64 system call numbers (the judged program has no libseccomp to resolve names with)
X86_64 = {"ptrace": (101, 0, 0, 0, 0), "bpf": (321, 0, 0, 0), "perf_event_open": (298, 0, 0, -1, -1, 0),
          "kexec_load": (246, 0, 0, 0, 0), "kexec_file_load": (320, -1, -1, 0, 0, 0),
          "keyctl": (250, 0, -3, 0), "add_key": (248, 0, 0, 0, 0, -3), "request_key": (249, 0, 0, 0, -3),
          "mount": (165, 0, 0, 0, 0, 0), "umount2": (166, 0, 0), "setns": (308, -1, 0), "unshare": (272, 0x20000),
          "userfaultfd": (323, 1), "io_uring_setup": (425, 1, 0), "process_vm_readv": (310, 1, 0, 0, 0, 0, 0),
          "init_module": (175, 0, 0, 0), "swapon": (167, 0, 0), "clone-newuser": (56, 0x10000000 | 17, 0, 0, 0, 0)}
PROGRAM = ("import ctypes, errno\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
           "r = libc.syscall(*[ctypes.c_long(a) for a in {args}])\n"
           "print('refused' if r == -1 and ctypes.get_errno() == errno.EPERM else f'result {{r}} errno {{ctypes.get_errno()}}')")


def stdio(sub_id: str, code: str, expected: str) -> dict:
    return {"id": sub_id, "code": code, "mode": "stdio", "tests": [{"stdin": "", "expected": expected}],
            "limits": LIMITS}


def filter_or_skip(executor: EmbeddedExecutor) -> None:
    if platform.machine() != "x86_64":
        pytest.skip(f"the corpus uses x86-64 system call numbers, this is {platform.machine()}")
    if not executor.health()["seccomp"]:
        pytest.skip(f"no seccomp filter on this host: {seccomp.filter_program()[1]}")


def test_filter_program_is_bpf_and_denies_the_listed_calls() -> None:
    program, reason = seccomp.filter_program()
    if program is None:
        assert "libseccomp" in reason
        pytest.skip(reason)
    assert len(program) % 8 == 0 and len(program) >= 8 * len(seccomp.denied_calls())
    assert {"ptrace", "bpf", "perf_event_open", "kexec_load", "keyctl", "add_key", "mount", "umount2", "setns",
            "unshare", "userfaultfd", "io_uring_setup"} <= set(seccomp.denied_calls())
    assert seccomp.filter_program()[0] is program      # built once per process


def test_denied_calls_fail_with_eperm_and_programs_still_work(executor: EmbeddedExecutor) -> None:
    filter_or_skip(executor)
    subs = [stdio(name, PROGRAM.format(args=list(args)), "refused") for name, args in X86_64.items()]
    subs += [
        # clone3 is ENOSYS (its flags cannot be filtered) so glibc falls back to clone: threads still work
        stdio("clone3", "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nr = libc.syscall(435, None, 0)\n"
              "print('nosys' if r == -1 and ctypes.get_errno() == 38 else ('result', r))", "nosys"),
        stdio("threads-and-subprocess", "import subprocess, threading\nout = []\nt = threading.Thread(target=out.append, "
              "args=(1,))\nt.start(); t.join()\nprint(out[0], subprocess.run(['/usr/bin/echo', 'x'], "
              "capture_output=True, text=True).stdout.strip())", "1 x"),
        # a denied call the program does not expect: its own error, the verdict reported cleanly
        stdio("uncaught", "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nif libc.unshare(0x20000):\n"
              "    raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))", ""),
        # another ABI (x32 getpid) bypassing the x86-64 rules is killed
        stdio("x32-abi", "import ctypes\nprint(ctypes.CDLL(None).syscall(0x40000000 | 39))", ""),
    ]
    results = executor.judge(subs)
    got = {r["id"]: (r["status"], r["tests"][0]["verdict"], r["tests"][0]["message"]) for r in results}
    want = dict({name: "AC" for name in X86_64}, clone3="AC", **{"threads-and-subprocess": "AC"}, uncaught="RE")
    want["x32-abi"] = "RE"
    assert {k: v[:2] for k, v in got.items()} == {k: ("ok", v) for k, v in want.items()}, got
    assert "Operation not permitted" in results[-2]["tests"][0].get("stderr", ""), results[-2]
    assert got["x32-abi"][2] == "killed by SIGSYS", got["x32-abi"]
    assert executor.supervisor.stray_processes() == []


def test_without_the_filter_the_calls_go_through(executor: EmbeddedExecutor) -> None:
    """The corpus can fail: with ``seccomp=False`` PTRACE_TRACEME and keyctl succeed."""
    filter_or_skip(executor)
    config = dataclasses.replace(executor.supervisor.config, slots=1, seccomp=False)
    subs = [stdio(name, PROGRAM.format(args=list(X86_64[name])), "refused") for name in ("ptrace", "keyctl")]
    with EmbeddedExecutor(config=config) as plain:
        assert plain.health()["seccomp"] is False
        results = plain.judge(subs)
    assert [r["tests"][0]["verdict"] for r in results] == ["WA", "WA"], results


# socket families: (name, family number, type); SOCK_DGRAM where the family has no SOCK_STREAM
FAMILIES_REFUSED = [("AF_VSOCK", 40, 1), ("AF_NETLINK", 16, 3), ("AF_PACKET", 17, 3), ("AF_UNSPEC", 0, 1),
                    ("AF_APPLETALK", 5, 2), ("AF_KEY", 15, 3), ("AF_ALG", 38, 5), ("AF_VSOCK-high-bits", 40 | 1 << 32, 1)]
SOCKET = ("import ctypes, errno\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
          "r = libc.syscall(ctypes.c_long(41), ctypes.c_long({family}), ctypes.c_long({kind}), ctypes.c_long(0))\n"
          "print('refused' if r == -1 and ctypes.get_errno() == errno.EPERM else f'result {{r}} errno {{ctypes.get_errno()}}')")
VSOCK_PYTHON = ("import socket\ntry:\n    socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)\n    print('created')\n"
                "except PermissionError:\n    print('refused')")
LOOPBACK = ("import socket\nsrv = socket.socket(socket.AF_INET6)\nsrv.bind(('::1', 0))\nsrv.listen()\n"
            "c = socket.create_connection(srv.getsockname()[:2])\na, b = socket.socketpair()\na.send(b'u')\n"
            "u = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\nv4 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            "print('ok', b.recv(1).decode())")


def test_only_unix_and_inet_sockets_can_be_created(executor: EmbeddedExecutor) -> None:
    """AF_VSOCK (not isolated by the network namespace), AF_NETLINK, AF_PACKET and every other family
    but AF_UNIX/AF_INET/AF_INET6 are EPERM (issue 58); the allowed families still work."""
    filter_or_skip(executor)
    subs = [stdio(name, SOCKET.format(family=family, kind=kind), "refused") for name, family, kind in FAMILIES_REFUSED]
    subs += [stdio("vsock-python", VSOCK_PYTHON, "refused"), stdio("loopback", LOOPBACK, "ok u"),
             stdio("socketpair-netlink", "import socket\ntry:\n    socket.socketpair(16, socket.SOCK_RAW)\n"
                   "    print('created')\nexcept PermissionError:\n    print('refused')", "refused")]
    results = executor.judge(subs)
    got = {r["id"]: (r["tests"][0]["verdict"], r["tests"][0]["message"][:80]) for r in results}
    assert all(v[0] == "AC" for v in got.values()), got


def test_the_family_rules_are_what_refuses(executor: EmbeddedExecutor) -> None:
    """The socket corpus can fail: without the filter an AF_NETLINK socket is created."""
    filter_or_skip(executor)
    config = dataclasses.replace(executor.supervisor.config, slots=1, seccomp=False)
    with EmbeddedExecutor(config=config) as plain:
        result, = plain.judge([stdio("netlink", SOCKET.format(family=16, kind=3), "refused")])
    assert result["tests"][0]["verdict"] == "WA", result


def test_a_non_loopback_service_needs_the_filter(monkeypatch, caplog) -> None:
    """Without libseccomp a non-loopback serve is refused (`serve` prints the reason as one line, exit 2);
    --insecure_no_seccomp warns once (the executor's own warning is then not repeated); loopback goes
    on; a started supervisor that applies no filter is refused too."""
    monkeypatch.setattr(seccomp, "filter_program", lambda: (None, "no seccomp filter: libseccomp is missing"))
    monkeypatch.setattr(seccomp, "_WARNED", set())
    refusal = seccomp.refusal_for_host("0.0.0.0", insecure_no_seccomp=False)
    assert "without the system-call filter (no seccomp filter: libseccomp is missing)" in refusal
    assert "--insecure_no_seccomp" in refusal and "\n" not in refusal
    assert seccomp.refusal_for_host("127.0.0.1", insecure_no_seccomp=False) is None
    assert seccomp.refusal_for_host("localhost", insecure_no_seccomp=False) is None
    with caplog.at_level("WARNING"):
        assert seccomp.refusal_for_host("0.0.0.0", insecure_no_seccomp=True) is None
        seccomp.warn_once("no seccomp filter: libseccomp is missing")      # the executor's: already said
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "WITHOUT the system-call filter (--insecure_no_seccomp)" in lines[0], lines
    assert seccomp.refusal_for_host("10.0.0.1", insecure_no_seccomp=False, active=False) is not None
    assert seccomp.refusal_for_host("10.0.0.1", insecure_no_seccomp=False, active=True) is None
