#!/bin/sh
# Makes sure Criterion (the test framework) is installed. As root on a fresh
# Debian machine it installs libcriterion-dev; otherwise it prints the exact
# command to run and fails.
set -eu
if echo '#include <criterion/criterion.h>' | ${CC:-cc} -E -x c - >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" = 0 ]; then
    echo "tests: installing libcriterion-dev"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libcriterion-dev >/dev/null
    exit 0
fi
echo "tests: Criterion is missing. Run: sudo apt-get install -y libcriterion-dev" >&2
exit 1
