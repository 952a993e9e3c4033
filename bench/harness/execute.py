"""Run one workload once under one allocator and measure it.

Every run goes through build/bench/measure (bench/measure.c), which forks
the program with LD_PRELOAD set to the allocator (none for the system
malloc), times it and writes its wait status, rusage (user, sys,
ru_maxrss) and peak RSS in KiB to a result file. Measuring from that small
C program rather than from Python keeps the interpreter's own resident set
out of the child's ru_maxrss, which Linux carries across exec. The peak is
the larger of ru_maxrss and the VmHWM measure reads when the program exits
(ru_maxrss alone misses up to 31 pages a CPU: measure.c says why).

stdout and stderr go to temporary files rather than pipes so that neither
can fill up and stall the child. A run that overstays its timeout is killed
with its whole process group.

A run fails when the program exits non-zero or by a signal (its own
self-checks found an allocator bug, or it crashed), or when ld.so could not
preload the allocator, which would otherwise silently measure glibc.
"""

import os
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field
from typing import Dict


@dataclass
class Run:
    ok: bool
    wall_s: float = 0.0
    maxrss_kib: float = 0.0         # ru_maxrss as the kernel reports it
    peak_kib: float = 0.0           # the larger of it and VmHWM at exit
    user_s: float = 0.0
    sys_s: float = 0.0
    metrics: Dict[str, float] = field(default_factory=dict)
    error: str = ""


def parse_metrics(text):
    """'metric NAME VALUE' lines -> {NAME: VALUE}; other lines are ignored."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "metric":
            try:
                out[parts[1]] = float(parts[2])
            except ValueError:
                pass
    return out


def parse_result(text):
    """measure's 'key value key value ...' line -> {key: float}."""
    parts = text.split()
    return {k: float(v) for k, v in zip(parts[0::2], parts[1::2])}


def _why_failed(status, err_text):
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    lines = [l for l in err_text.strip().splitlines() if l.strip()]
    tail = lines[-1] if lines else ""
    return f"exit {os.WEXITSTATUS(status)}" + (f": {tail}" if tail else "")


def _spawn(cmd, env, timeout_s):
    """Run cmd with output in temp files; (timed_out, stdout, stderr)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen(cmd, env=env, stdout=out, stderr=err,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
        timed_out = False
        try:
            child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        out.seek(0)
        err.seek(0)
        return (timed_out, out.read().decode(errors="replace"),
                err.read().decode(errors="replace"))


def run_once(measure, argv, preload, timeout_s, options=None):
    """One measured run of argv with `preload` (a .so path or None) and,
    when given, TALLY_OPTIONS=options."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.pop("TALLY_OPTIONS", None)
    if options:
        env["TALLY_OPTIONS"] = options
    with tempfile.NamedTemporaryFile("r", suffix=".measure") as res:
        cmd = [measure, res.name] + (["-p", preload] if preload else []) + argv
        try:
            timed_out, out_text, err_text = _spawn(cmd, env, timeout_s)
        except OSError as exc:
            return Run(ok=False, error=str(exc))
        if timed_out:
            return Run(ok=False, error=f"timed out after {timeout_s:.0f} s")
        got = parse_result(res.read())
    if "status" not in got:
        return Run(ok=False, error="measure failed: " + err_text.strip()[-200:])
    run = Run(ok=True, wall_s=got["wall_s"], maxrss_kib=got["maxrss_kib"],
              peak_kib=got.get("peak_kib", got["maxrss_kib"]),
              user_s=got["user_s"], sys_s=got["sys_s"],
              metrics=parse_metrics(out_text))
    status = int(got["status"])
    if "cannot be preloaded" in err_text:
        run.ok = False
        run.error = "LD_PRELOAD failed: " + err_text.strip().splitlines()[0]
    elif not os.WIFEXITED(status) or os.WEXITSTATUS(status):
        run.ok, run.error = False, _why_failed(status, err_text)
    return run
