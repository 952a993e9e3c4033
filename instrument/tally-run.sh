#!/bin/sh
# tally - run a program under libtally with instrumentation switched on.
#
#   tally run [--debug] [--timing] [--stats] [--backtrace=N]
#             [--report=FILE] [--options=KEY=VALUE,...] -- PROG [ARGS...]
#
# Preloads libtally.so (found next to this script, or in ../lib when
# installed), sets TALLY_OPTIONS, and runs PROG; the library prints the
# requested reports when PROG exits. With no mode flag, --stats is implied.
set -eu

usage() {
    sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

[ $# -ge 1 ] && [ "$1" = run ] || usage
shift
here=$(cd "$(dirname "$0")" && pwd)
lib=
for candidate in "$here/libtally.so" "$here/../lib/libtally.so"; do
    [ -f "$candidate" ] && lib=$candidate && break
done
[ -n "$lib" ] || { echo "tally: libtally.so not found next to $0" >&2; exit 1; }

opts= mode=
add() { opts="${opts:+$opts,}$1"; }
while [ $# -gt 0 ]; do
    case $1 in
        --debug) add debug=1; mode=1 ;;
        --timing) add timing=1; mode=1 ;;
        --stats) add stats=1; mode=1 ;;
        --backtrace=*) add "backtrace=${1#*=}" ;;
        --report=*) add "report=${1#*=}" ;;
        --options=*) add "${1#*=}" ;;
        --) shift; break ;;
        -h|--help) usage ;;
        *) echo "tally: unknown flag $1" >&2; usage ;;
    esac
    shift
done
[ $# -ge 1 ] || usage
[ -n "$mode" ] || add stats=1
[ -n "${TALLY_OPTIONS:-}" ] && opts="$TALLY_OPTIONS,$opts"

TALLY_OPTIONS=$opts LD_PRELOAD="$lib${LD_PRELOAD:+:$LD_PRELOAD}" exec "$@"
