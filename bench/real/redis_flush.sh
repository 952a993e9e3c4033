#!/bin/sh
# redis_flush.sh - a server that frees its peak and then waits: redis-server
# under an allocator, filled by redis-benchmark, then FLUSHALL; prints the
# throughput, the server's peak RSS and its RSS 0.3 s and 2.5 s after the
# flush (docs/benchmarks.md, "Real programs").
#
#   sh bench/real/redis_flush.sh [PRELOAD_SO|none] [TALLY_OPTIONS]
#
# Debian's redis-server links jemalloc: with nothing preloaded it is
# jemalloc's run, and it purges through mallctl on FLUSHALL, which a
# preloaded allocator other than jemalloc does not see.
set -u
pre=${1:-none}
opts=${2:-}
command -v redis-server >/dev/null 2>&1 && command -v redis-benchmark >/dev/null 2>&1 ||
    { echo "redis_flush.sh: redis-server and redis-benchmark needed" >&2; exit 2; }
port=$((20000 + $$ % 10000))
if [ "$pre" = none ]; then
    redis-server --port "$port" --save '' --appendonly no >/dev/null 2>&1 &
else
    TALLY_OPTIONS=$opts LD_PRELOAD=$pre redis-server --port "$port" --save '' --appendonly no >/dev/null 2>&1 &
fi
pid=$!
sleep 0.5
rps=$(redis-benchmark -p "$port" -q -n 200000 -c 20 -P 8 -d 1000 -r 100000 -t set,get,lpush,lpop 2>/dev/null |
      tr '\r' '\n' | awk '/requests per second/ { printf "%s%s ", $1, $2 }')
redis-cli -p "$port" flushall >/dev/null
sleep 0.3
early=$(awk '/VmRSS/ { print $2 }' "/proc/$pid/status")
sleep 2.2
late=$(awk '/VmRSS/ { print $2 }' "/proc/$pid/status")
peak=$(awk '/VmHWM/ { print $2 }' "/proc/$pid/status")
kill "$pid"
wait "$pid" 2>/dev/null
echo "$rps peak=${peak}K flush+0.3s=${early}K flush+2.5s=${late}K"
