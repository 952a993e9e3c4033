"""The workload table: which program runs with which arguments.

Each workload is one program in build/bench/ (source bench/<prog>.c) and a
command line for the default suite and one for --full. The default suite is
sized so that one run with the system malloc takes well under a second or
two and `make bench` with five allocators x 3 reps stays within minutes;
--full uses the seeds' own sizes (asterisk 10 x 10M pairs, rssfoot 20M
replacements) and longer inputs elsewhere.

`time_metric` names a metric that replaces wall time in the time table:
larson runs for a fixed time, so its throughput is turned into a time;
rssfoot's wall time includes a fixed 2 s idle sleep, so its time is the
churn alone. Those rows are marked with a dagger.

`work_per_thread` says how a threaded workload's work grows with -t: true
when each thread does a fixed amount (prodcons, cache-*, mstress), so the
total grows with the thread count; false when the total is fixed (larson's
time is per 10M replacements, threadchurn runs -n threads in all).
bench/scaling.py needs it to turn times into throughput.
"""

from dataclasses import dataclass, field
from typing import List, Optional


@dataclass
class Workload:
    name: str
    prog: str
    args: List[str]
    full_args: List[str]
    models: str
    seed: Optional[str] = None       # seed file it reproduces, if any
    threaded: bool = False           # takes -t THREADS
    work_per_thread: bool = False    # threaded: each thread does fixed work
    time_metric: Optional[str] = None
    tags: List[str] = field(default_factory=list)


WORKLOADS = [
    Workload("asterisk", "w_asterisk", ["-n", "10", "-i", "2000000"],
             ["-n", "10", "-i", "10000000"],
             "10 timed runs of malloc(4000)/free pairs", seed="000"),
    Workload("latency-free", "w_latency", ["-m", "free"], ["-m", "free"],
             "single malloc latency, freed at once; bulk pairs", seed="001"),
    Workload("latency-touch", "w_latency", ["-m", "touch"], ["-m", "touch"],
             "single malloc latency, kept and touched; faults", seed="001"),
    Workload("realloc-M", "w_realloc", ["-l", "64", "-i", "4", "-M"],
             ["-l", "64", "-i", "16", "-M"],
             "realloc growth 1..64 MiB, new pages written", seed="002"),
    Workload("realloc-m", "w_realloc", ["-l", "64", "-i", "4", "-m"],
             ["-l", "64", "-i", "16", "-m"],
             "realloc growth 1..64 MiB, never touched", seed="002"),
    Workload("bufgrow", "w_bufgrow", ["-n", "2000"], ["-n", "10000"],
             "buffers grown by doubling to 16 KiB..8 MiB, written, freed"),
    Workload("bufcycle", "w_bufcycle", ["-n", "6", "-b", "64"],
             ["-n", "20", "-b", "100"],
             "batches of 64 live 128 KiB..1 MiB buffers, grown 2x, freed"),
    Workload("bufregrow", "w_bufcycle",
             ["-n", "6", "-b", "500", "-s", "32768", "-S", "131072", "-g", "2"],
             ["-n", "20", "-b", "500", "-s", "32768", "-S", "131072", "-g", "2"],
             "batches of 500 live 32..128 KiB buffers, each grown 2x twice"),
    Workload("rssfoot", "w_rssfoot", ["-o", "2000000", "-s", "2"],
             ["-o", "20000000", "-s", "2"],
             "server churn, shrink to 10%, regrow; RSS per phase", seed="003",
             time_metric="bench_time_s"),
    Workload("smallobj", "w_smallobj", ["-d", "18", "-n", "4"],
             ["-d", "20", "-n", "8"],
             "binary trees of small nodes built and torn down"),
    Workload("prodcons", "w_prodcons", ["-n", "2000000"], ["-n", "10000000"],
             "every block freed by the next thread in a ring", threaded=True,
             work_per_thread=True),
    Workload("larson", "w_larson", ["-s", "1", "-r", "5"], ["-s", "5", "-r", "10"],
             "threads replace random objects in a shared pool",
             threaded=True, time_metric="bench_time_s"),
    Workload("cache-thrash", "w_falseshare", ["-m", "thrash"],
             ["-m", "thrash", "-r", "400000"],
             "threads write their own small objects hard", threaded=True,
             work_per_thread=True),
    Workload("cache-scratch", "w_falseshare", ["-m", "scratch"],
             ["-m", "scratch", "-r", "400000"],
             "threads reuse objects freed from a shared line", threaded=True,
             work_per_thread=True),
    Workload("mstress", "w_mstress", ["-n", "1000000", "-r", "5"],
             ["-n", "2000000", "-r", "10"],
             "mixed sizes up to 1 MiB, random lifetimes, transfers",
             threaded=True, work_per_thread=True),
    Workload("malloc-large", "w_large", ["-n", "1000"], ["-n", "5000"],
             "blocks of 256 KiB..32 MiB allocated, touched, freed"),
    Workload("frag", "w_frag", ["-n", "1000000", "-r", "3"],
             ["-n", "1000000", "-r", "10"],
             "1M small objects, every other freed, medium ones added"),
    Workload("threadchurn", "w_threadchurn", ["-n", "10000"], ["-n", "100000"],
             "many short-lived threads allocating a little", threaded=True),
    Workload("bufchurn", "w_bufchurn", ["-n", "20000"], ["-n", "200000"],
             "threads replace live 32..256 KiB buffers at random",
             threaded=True, work_per_thread=True),
    Workload("phase", "w_phase", ["-n", "20000", "-r", "5"], ["-n", "20000", "-r", "20"],
             "20k records of 4,000 B grown to 8.5..16 KB, freed; again"),
]


def select(names):
    """The workloads named in a comma list (all when empty), in table order."""
    if not names:
        return list(WORKLOADS)
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    known = {w.name: w for w in WORKLOADS}
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise ValueError(f"unknown workload(s): {', '.join(unknown)}; "
                         f"known: {', '.join(known)}")
    return [w for w in WORKLOADS if w.name in wanted]


def command(work, bin_dir, full, threads):
    """The argv of one run."""
    argv = [f"{bin_dir}/{work.prog}"] + (work.full_args if full else work.args)
    if work.threaded:
        argv += ["-t", str(threads)]
    return argv
