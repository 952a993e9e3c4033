#!/bin/sh
# Makes sure the test tools are installed: Criterion (the test framework),
# valgrind (memcheck, whose header-only client requests tally compiles in
# when present) and python3 (an unmodified program the linking tests
# preload; a fresh Debian image has none, and build-essential, Criterion and
# valgrind do not bring it). As root on a fresh Debian machine it installs
# what is missing; otherwise it prints the exact command to run and fails.
set -eu
missing=
echo '#include <criterion/criterion.h>' | ${CC:-cc} -E -x c - >/dev/null 2>&1 ||
    missing="$missing libcriterion-dev"
command -v valgrind >/dev/null 2>&1 && [ -f /usr/include/valgrind/memcheck.h ] ||
    missing="$missing valgrind"
command -v python3 >/dev/null 2>&1 || missing="$missing python3"
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ]; then
    echo "tests: installing$missing"
    apt-get update -qq
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
    exit 0
fi
echo "tests: missing$missing. Run: sudo apt-get install -y$missing" >&2
exit 1
