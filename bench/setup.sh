#!/bin/sh
# bench/setup.sh - make a fresh Debian machine ready for `make bench`.
#
# Installs the peer allocators (jemalloc, mimalloc, tcmalloc) and python3
# with apt-get when they are missing and we are root. Every step may fail
# (no network, not root, not Debian): the suite then compares whatever is
# installed, so this script always exits 0.

LIBDIR=/usr/lib/x86_64-linux-gnu
missing=""

[ -e "$LIBDIR/libjemalloc.so.2" ] || missing="$missing libjemalloc2"
[ -e "$LIBDIR/libmimalloc.so.2" ] || [ -e "$LIBDIR/libmimalloc.so.2.0" ] ||
    missing="$missing libmimalloc2.0"
[ -e "$LIBDIR/libtcmalloc_minimal.so.4" ] || missing="$missing libtcmalloc-minimal4"
command -v python3 >/dev/null 2>&1 || missing="$missing python3"

if [ -z "$missing" ]; then
    echo "bench/setup.sh: peers and python3 present"
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "bench/setup.sh: missing:$missing (not root or no apt-get; comparing what is installed)"
    exit 0
fi

echo "bench/setup.sh: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q || echo "bench/setup.sh: apt-get update failed; trying the install anyway"
# One package at a time, so one unavailable name does not block the rest.
for pkg in $missing; do
    apt-get install -y -q --no-install-recommends "$pkg" ||
        echo "bench/setup.sh: could not install $pkg; going on without it"
done
exit 0
