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
        --report=*)
            # TALLY_OPTIONS splits at commas: the report would go to the
            # path's first part and the rest be read as options.
            case ${1#*=} in
                *,*) echo "tally: cannot write the report to ${1#*=}: TALLY_OPTIONS splits" \
                          "at commas (choose a path without one)" >&2
                     exit 1 ;;
            esac
            add "report=${1#*=}" ;;
        --options=*) add "${1#*=}" ;;
        --) shift; break ;;
        -h|--help) usage ;;
        *) echo "tally: unknown flag $1" >&2; usage ;;
    esac
    shift
done
[ $# -ge 1 ] || usage
[ -n "$mode" ] || add stats=1

# Where the loader would drop the preload and run PROG on the system malloc
# with no report, say so instead of letting a clean run look like one.
case $lib in
    *[[:space:]:]*)
        echo "tally: cannot preload $lib: LD_PRELOAD splits paths at spaces and colons" \
             "(move the library, or link to it from a plain path)" >&2
        exit 1 ;;
esac
prog=$(command -v -- "$1" 2>/dev/null || true)
if [ -f "$prog" ]; then
    if [ -u "$prog" ] || [ -g "$prog" ]; then
        echo "tally: warning: $1 is set-user-ID or set-group-ID: the loader ignores" \
             "LD_PRELOAD for it, so it runs without tally" >&2
    elif [ "$(head -c 4 "$prog" | tr -d '\177')" = ELF ] &&
         ! head -c 4096 "$prog" | LC_ALL=C grep -qa '/ld-'; then
        echo "tally: warning: $1 is statically linked: LD_PRELOAD cannot reach it" \
             "(link it with libtally.a instead)" >&2
    fi
fi
[ -n "${TALLY_OPTIONS:-}" ] && opts="$TALLY_OPTIONS,$opts"

TALLY_OPTIONS=$opts LD_PRELOAD="$lib${LD_PRELOAD:+:$LD_PRELOAD}" exec "$@"
