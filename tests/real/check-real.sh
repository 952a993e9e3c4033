#!/bin/sh
# check-real.sh - run real programs under tally and compare their output.
#
#   sh tests/real/check-real.sh /abs/path/to/libtally.so     (make check-real)
#
# Unit tests exercise tally through its API; this checks that it can stand in
# for glibc malloc under large, real, allocation-heavy programs. Each workload
# below (python3, sqlite3, git, perl, gcc, part of CPython's own test suite,
# a redis server under load) runs twice in fresh directories: once plainly and
# once with LD_PRELOAD=libtally.so (inherited by every child process: git's
# helpers, gcc's cc1/as/ld, ...; for redis only the server is preloaded, and a
# check makes sure its /proc/PID/maps shows libtally.so). The workloads are
# deterministic, so stdout plus the exit status must be identical; a crash, a
# hang (killed after $TIMEOUT s), a heap corruption that changes results, or
# any difference counts as a failure. A first check makes sure the preload
# really took effect (a wrong path only makes ld.so print a warning, and every
# comparison would then pass vacuously): tally_version() must be resolvable
# in a preloaded python3.
#
# As root, missing tools are installed with apt-get; otherwise the script
# prints the command to run and fails. Prints one line per check and a final
# "N passed, M failed"; exits non-zero if anything failed.

# The workload scripts are written with single quotes on purpose: they expand
# $IN when they run.
# shellcheck disable=SC2016
set -eu

TIMEOUT=300   # seconds per run; each workload takes a few seconds normally

if [ $# -ne 1 ]; then
    echo "usage: sh $0 /abs/path/to/libtally.so" >&2
    exit 2
fi
LIB=$1
case $LIB in /*) ;; *) LIB=$PWD/$LIB ;; esac
if [ ! -f "$LIB" ]; then
    echo "check-real: $LIB: no such file (run make first)" >&2
    exit 2
fi

# ---- tools -----------------------------------------------------------------
# install_pkgs PACKAGE...: installs the packages with apt-get as root, otherwise
# prints the command to run and exits.
install_pkgs() {
    if [ "$(id -u)" = 0 ]; then
        echo "check-real: installing $*"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
    else
        echo "check-real: missing packages: $*. Run:" >&2
        echo "  sudo apt-get update && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $*" >&2
        exit 1
    fi
}
# /usr/bin/python3 is Debian's python3, whose test suite is packaged (python3
# on PATH may be another build, pyenv's for instance).
missing=
for tool in python3:python3 /usr/bin/python3:python3 sqlite3:sqlite3 \
            perl:perl git:git gcc:gcc size:binutils objdump:binutils \
            nm:binutils timeout:coreutils diff:diffutils awk:mawk \
            redis-server:redis-server redis-cli:redis-tools \
            redis-benchmark:redis-tools; do
    command -v "${tool%%:*}" >/dev/null 2>&1 && continue
    case " $missing " in *" ${tool#*:} "*) ;; *) missing="$missing ${tool#*:}" ;; esac
done
# shellcheck disable=SC2086
[ -z "$missing" ] || install_pkgs $missing
# CPython's test package (Debian: libpython3.X-testsuite, X from /usr/bin/python3).
if ! /usr/bin/python3 -I -c 'import test.test_dict' >/dev/null 2>&1; then
    install_pkgs "libpython$(/usr/bin/python3 -I -c 'import sys; print("%d.%d" % sys.version_info[:2])')-testsuite"
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/check-real.XXXXXX")
# Servers started by a workload (redis) write their pid to
# $TMP/NAME.MODE/server.pid and remove it once they are gone; whatever is left
# is killed on exit.
cleanup() {
    for f in "$TMP"/*/server.pid; do
        [ -f "$f" ] && { kill -9 "$(cat "$f")" 2>/dev/null || :; }
    done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
IN=$TMP/in
mkdir "$IN"
export IN PYTHONHASHSEED=0 LC_ALL=C TZ=UTC
unset LD_PRELOAD 2>/dev/null || true

passed=0
failed=0
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

# run_one MODE NAME [server]: runs $IN/NAME.sh with `sh -eu` in a fresh
# directory $TMP/NAME.MODE; stdout, then the exit status, go to
# $TMP/NAME.MODE.out, stderr to $TMP/NAME.MODE.err. With "server", the script
# itself is never preloaded: it gets SERVER_PRELOAD (empty when plain, the
# library under tally) to preload its server with.
run_one() {
    dir=$TMP/$2.$1
    mkdir "$dir"
    rc=0
    if [ "${3-}" = server ]; then
        preload=
        [ "$1" = tally ] && preload=$LIB
        (cd "$dir" && SERVER_PRELOAD=$preload timeout "$TIMEOUT" sh -eu "$IN/$2.sh") \
            >"$dir.out" 2>"$dir.err" || rc=$?
    elif [ "$1" = tally ]; then
        (cd "$dir" && LD_PRELOAD=$LIB timeout "$TIMEOUT" sh -eu "$IN/$2.sh") \
            >"$dir.out" 2>"$dir.err" || rc=$?
    else
        (cd "$dir" && timeout "$TIMEOUT" sh -eu "$IN/$2.sh") \
            >"$dir.out" 2>"$dir.err" || rc=$?
    fi
    echo "exit status $rc" >>"$dir.out"
}

# check NAME [server]: runs workload NAME plainly and under tally and compares.
check() {
    t0=$(now); run_one plain "$1" "${2-}"
    t1=$(now); run_one tally "$1" "${2-}"
    t2=$(now)
    if [ "$(tail -n 1 "$TMP/$1.plain.out")" != "exit status 0" ]; then
        # The workload itself is broken here: matching output would prove nothing.
        echo "check-real: $1 FAILED (the plain run failed, not tally)"
        tail -n 10 "$TMP/$1.plain.err" | sed 's/^/    /'
        failed=$((failed + 1))
    elif cmp -s "$TMP/$1.plain.out" "$TMP/$1.tally.out"; then
        echo "check-real: $1 ok ($(secs "$t0" "$t1")s plain, $(secs "$t1" "$t2")s tally)"
        passed=$((passed + 1))
    else
        echo "check-real: $1 FAILED"
        diff -u "$TMP/$1.plain.out" "$TMP/$1.tally.out" | head -n 20 | sed 's/^/    /'
        if [ -s "$TMP/$1.tally.err" ]; then
            echo "    -- stderr under tally (last 10 lines):"
            tail -n 10 "$TMP/$1.tally.err" | sed 's/^/    /'
        fi
        failed=$((failed + 1))
    fi
}

# ---- 0. the preload took effect ----------------------------------------------
ver=$(LD_PRELOAD=$LIB timeout 60 python3 -c '
import ctypes
f = ctypes.CDLL(None).tally_version
f.restype = ctypes.c_char_p
print(f().decode())' 2>"$TMP/preload.err") || ver=
case $ver in [0-9]*.[0-9]*) ok=1 ;; *) ok=0 ;; esac
if [ "$ok" = 1 ]; then
    echo "check-real: preload ok (tally_version() = $ver)"
    passed=$((passed + 1))
else
    echo "check-real: preload FAILED (tally_version not found with LD_PRELOAD=$LIB)"
    sed 's/^/    /' "$TMP/preload.err" | tail -n 10
    failed=$((failed + 1))
fi

# ---- 1. python3: dicts, strings, json, sets, bytearrays, threads -------------
cat >"$IN/work.py" <<'EOF'
import hashlib, json, threading

def h(s):
    if isinstance(s, str):
        s = s.encode()
    return hashlib.sha256(s).hexdigest()[:16]

d = {"key-%07d-%d" % (i * 7919 % 1000003, i): i for i in range(300000)}
keys = sorted(d)
print("dict", len(d), h(",".join(keys)))
blob = json.dumps(d, sort_keys=True)
back = json.loads(blob)
print("json", len(blob), back == d, h(blob))
rev = [k.upper()[::-1] for k in keys if k.endswith(("1", "3", "7"))]
print("listcomp", len(rev), h("".join(rev)))
nested = [[str(j) * (j % 5) for j in range(i % 50)] for i in range(20000)]
print("nested", sum(len(x) for x in nested), h(repr(nested[-3:])))
s = set()
for i in range(200000):
    s.add(str(i))
for i in range(0, 200000, 2):
    s.discard(str(i))
print("set", len(s), sum(int(x) for x in s))
ba = bytearray()
for i in range(100000):
    ba += str(i).encode()
print("bytearray", len(ba), h(bytes(ba)))
del d, back, blob, keys, rev, nested, s, ba

results = [None] * 4
def work(t):
    acc = []
    for i in range(60000):
        x = "%d:%d:" % (t, i) + "ab" * (i % 17)
        acc.append("-".join(x.replace("ab", "ba").split(":")[::-1]))
    results[t] = h("|".join(acc))
threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("threads", results)
EOF
echo 'python3 "$IN/work.py"' >"$IN/python3.sh"
check python3

# ---- 2. sqlite3: bulk inserts, indexes, joins, aggregates, vacuum ------------
cat >"$IN/workload.sql" <<'EOF'
CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT, region TEXT);
CREATE TABLE orders(id INTEGER PRIMARY KEY, customer INTEGER, amount INTEGER, note TEXT);
BEGIN;
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 5000)
INSERT INTO customers SELECT x, 'cust-' || x, 'region-' || (x % 17) FROM c;
COMMIT;
BEGIN;
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000)
INSERT INTO orders
SELECT x, (x * 7919) % 5000 + 1, (x * 104729) % 10007,
       printf('note %d %s', x, substr('abcdefghijklmnopqrstuvwxyz', x % 26 + 1, x % 7 + 1))
FROM c;
COMMIT;
CREATE INDEX orders_customer ON orders(customer);
CREATE INDEX orders_amount ON orders(amount);
SELECT count(*), sum(amount), min(amount), max(amount) FROM orders;
SELECT c.region, count(*), sum(o.amount), printf('%.3f', avg(o.amount))
FROM orders o JOIN customers c ON c.id = o.customer
GROUP BY c.region ORDER BY c.region;
SELECT customer, sum(amount) AS s FROM orders GROUP BY customer ORDER BY s DESC, customer LIMIT 10;
SELECT length(group_concat(note, ',')) FROM (SELECT note FROM orders ORDER BY note);
SELECT id, amount, sum(amount) OVER (ORDER BY id ROWS BETWEEN 10 PRECEDING AND CURRENT ROW)
FROM orders WHERE id % 10000 = 0;
BEGIN;
UPDATE orders SET note = upper(note) || '!' WHERE amount % 3 = 0;
DELETE FROM orders WHERE amount % 5 = 0;
COMMIT;
SELECT count(*), total(length(note)), count(DISTINCT note) FROM orders;
SELECT region, group_concat(name, ' ') IS NOT NULL, count(*)
FROM customers WHERE id IN (SELECT customer FROM orders WHERE amount > 9990)
GROUP BY region ORDER BY region;
VACUUM;
PRAGMA integrity_check;
EOF
echo 'sqlite3 db.sqlite <"$IN/workload.sql"' >"$IN/sqlite3.sh"
check sqlite3

# ---- 3. git: 200 commits, gc, history walks -----------------------------------
cat >"$IN/git.sh" <<'EOF'
export HOME="$PWD" GIT_CONFIG_NOSYSTEM=1 \
       GIT_AUTHOR_NAME=tally GIT_AUTHOR_EMAIL=tally@example.org \
       GIT_COMMITTER_NAME=tally GIT_COMMITTER_EMAIL=tally@example.org
git -c init.defaultBranch=main init -q repo
cd repo
git config gc.auto 0
i=1
while [ "$i" -le 200 ]; do
    mkdir -p "dir$((i % 7))"
    printf 'commit %d line %d\n' "$i" "$((i * 31 % 97))" >>"dir$((i % 7))/file$((i % 20)).txt"
    seq "$i" "$((i + 50))" >"dir$((i % 7))/seq$((i % 13)).txt"
    [ $((i % 10)) -eq 0 ] && printf 'new file %d\n' "$i" >"new$i.txt"
    [ $((i % 25)) -eq 0 ] && rm -f "new$((i - 20)).txt"
    git add -A
    GIT_AUTHOR_DATE="$((1600000000 + i * 60)) +0000" \
    GIT_COMMITTER_DATE="$((1600000000 + i * 60)) +0000" \
        git commit -q -m "commit $i"
    i=$((i + 1))
done
git gc -q
git log --oneline | wc -l
git rev-parse HEAD
git count-objects -v | grep -v size
git fsck --no-progress --full
git log --stat --format='%H %s' | cksum
git diff --stat HEAD~150 HEAD | tail -n 1
git rev-list --objects --all | wc -l
git archive --format=tar HEAD | cksum
EOF
check git

# ---- 4. perl: hashes, sorting, regexes, substitutions -------------------------
cat >"$IN/work.pl" <<'EOF'
use strict; use warnings;
sub ck { unpack("%32C*", $_[0]) }
my %h;
$h{sprintf("k%06d", ($_ * 7919) % 200003)} = ("v" x ($_ % 13)) . $_ for 0 .. 199999;
my @k = sort keys %h;
print scalar(@k), " ", ck(join(",", @k)), "\n";
my $txt = join("\n", map { "line $_: $h{$_}" } @k);
my @m = ($txt =~ /k(\d+)9: (v+)(\d+)/g);
print scalar(@m), " ", ck(join("", @m)), "\n";
(my $t2 = $txt) =~ s/v{3,}/<$&>/g;
print length($t2), " ", ck($t2), "\n";
my %words;
$words{lc $_}++ for split /[\s:<>]+/, uc $t2;
print scalar(keys %words), " ", ck(join("", map { "$_=$words{$_}" } sort keys %words)), "\n";
my @sorted = sort { length($h{$a}) <=> length($h{$b}) or $b cmp $a } @k;
print "$sorted[0] $sorted[-1] ", ck(join("", @sorted[0 .. 999])), "\n";
my $count = ($txt =~ tr/v//);
print "$count ", scalar(reverse($k[-1])), " ", ck(lc(uc($txt))), "\n";
EOF
echo 'perl "$IN/work.pl"' >"$IN/perl.sh"
check perl

# ---- 5. gcc: compile and link 2000 generated functions ----------------------
awk 'BEGIN {
    n = 2000
    print "#include <stdio.h>"
    print "struct s { int a, b; char name[16]; };"
    for (i = 0; i < n; i++) {
        printf "unsigned f%d(unsigned x) {\n", i
        printf "    struct s v = { (int)x, %d, \"f%d\" };\n", i, i
        printf "    for (int k = 0; k < %d; k++)\n", i % 7 + 1
        printf "        switch ((x + k) %% 4) {\n"
        printf "        case 0: x = x * %d + v.b; break;\n", i * 2 + 1
        printf "        case 1: x ^= x >> %d; break;\n", i % 13 + 1
        printf "        case 2: x += (unsigned)v.name[k %% 4]; break;\n"
        printf "        default: x = (x << 3) - %d;\n", i
        printf "        }\n"
        printf "    return x + (unsigned)v.a;\n}\n"
    }
    print "int main(void) {"
    print "    unsigned acc = 1;"
    for (i = 0; i < n; i++) printf "    acc = f%d(acc);\n", i
    print "    printf(\"%u\\n\", acc);"
    print "    return 0;"
    print "}"
}' >"$IN/gen.c"
cat >"$IN/gcc.sh" <<'EOF'
cp "$IN/gen.c" gen.c
gcc -O1 -c gen.c -o gen.o
size gen.o
nm gen.o | cksum
objdump -d gen.o | cksum
gcc gen.o -o gen
./gen
EOF
check gcc

# ---- 6. CPython's own tests: dict, list, set, unicode, threading --------------
# Debian's /usr/bin/python3 with its libpython3.X-testsuite. -v makes each
# module report how many tests ran and were skipped; those counts, the
# modules run and the final summary are compared (timings are cut off).
cat >"$IN/pytest.sh" <<'EOF'
unset PYTHONPATH PYTHONHOME PYTHONSTARTUP
rc=0
TMPDIR=$PWD /usr/bin/python3 -m test -v test_dict test_list test_set \
    test_unicode test_threading >regrtest.log 2>&1 || rc=$?
awk '
    /^[0-9]+:[0-9][0-9]:[0-9][0-9] .*\[ *[0-9]+\/[0-9]+(\/[0-9]+)?\] test_/ {
        match($0, /\[ *[0-9]+\/[0-9]+(\/[0-9]+)?\] test_[A-Za-z0-9_.]+/)
        print substr($0, RSTART, RLENGTH)
        next
    }
    /^Ran [0-9]+ tests? in / { sub(/ in .*/, ""); print; next }
    /^(OK|FAILED)( \(.*\))?$/ { print; next }
    /^== Tests result: / { summary = 1 }
    summary && !/^Total duration: / { print }
' regrtest.log
exit "$rc"
EOF
check pytest

# ---- 7. redis: a server under redis-benchmark, then its data checked ----------
# Only redis-server is preloaded; redis-cli and redis-benchmark run plainly.
# The server runs on a free loopback port, saves nothing and is shut down at
# the end (or killed on any exit). Compared: all data-command replies, the
# DEBUG DIGEST of the whole data set, the benchmark's exit status (its rates
# go to stderr), that the server survived the load, and its exit status.
awk 'BEGIN {
    for (i = 1; i <= 3000; i++) {
        v = sprintf("%*s", i * 37 % 2000 + 1, ""); gsub(/ /, substr("abcdefgh", i % 8 + 1, 1), v)
        printf "SET str:%d %s\n", i, v
        printf "RPUSH list:%d item-%d\n", i % 10, i
        printf "SADD set:%d m-%d\n", i % 7, i * 13 % 1000
        printf "HSET hash:%d f-%d v-%d\n", i % 5, i, i * i % 9973
        printf "ZADD zset %d z-%d\n", i * 7919 % 10007, i
        printf "INCRBY ctr %d\n", i
        if (i % 3 == 0) printf "APPEND str:%d -tail-%d\n", i, i
        if (i % 5 == 0) printf "DEL str:%d\n", i - 2
        if (i % 11 == 0) printf "LPOP list:%d\n", i % 10
        if (i % 13 == 0) printf "SREM set:%d m-%d\n", i % 7, i * 7 % 1000
        if (i % 17 == 0) printf "HDEL hash:%d f-%d\n", i % 5, i - 5
    }
    print "SETRANGE big 2000000 x"
    print "APPEND big end"
    q = sprintf("%c", 39)
    print "EVAL \"local t = {} for i = 1, 100000 do t[i] = tostring(i * 7) .. " q "x" q " end local s = table.concat(t, " q "," q ") return {#s, redis.sha1hex(s)}\" 0"
}' >"$IN/redis-load.txt"
cat >"$IN/redis-query.txt" <<'EOF'
DBSIZE
GET str:1
STRLEN str:2999
GETRANGE str:2999 -16 -1
STRLEN str:3000
STRLEN big
GETRANGE big -4 -1
LLEN list:3
LRANGE list:3 0 20
LRANGE list:7 -5 -1
SCARD set:2
SISMEMBER set:2 m-26
HLEN hash:4
HGET hash:4 f-2999
HGET hash:1 f-1
ZCARD zset
ZRANGE zset 0 10 WITHSCORES
ZREVRANGE zset 0 5 WITHSCORES
GET ctr
GET key:__rand_int__
GET counter:__rand_int__
LLEN mylist
SCARD myset
HGETALL myhash
DEBUG DIGEST
EOF
cat >"$IN/redis.sh" <<'EOF'
pid=
trap '[ -z "$pid" ] || { kill -9 "$pid"; wait "$pid"; } 2>/dev/null || :' EXIT
cli() { redis-cli -h 127.0.0.1 -p "$port" "$@"; }
# alive: the server has not exited (kill -0 would also accept a zombie).
alive() {
    [ -r "/proc/$pid/stat" ] || return 1
    case $(sed 's/.*) //' "/proc/$pid/stat") in [ZX]*) return 1 ;; esac
}
# A free port: ask the kernel for one, retry if someone takes it meanwhile.
for try in 1 2 3 4 5; do
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    env ${SERVER_PRELOAD:+LD_PRELOAD="$SERVER_PRELOAD"} redis-server --bind 127.0.0.1 \
        --port "$port" --save '' --appendonly no --daemonize no --dir "$PWD" \
        --enable-debug-command local >>server.log 2>&1 &
    pid=$!
    echo "$pid" >server.pid
    n=0
    # (with a time limit: some other program may hold the port and say nothing)
    while alive && [ "$(timeout 5 redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" != PONG ]; do
        n=$((n + 1))
        [ "$n" -lt 300 ] || { echo "redis-server: no answer on port $port" >&2; exit 1; }
        sleep 0.1
    done
    alive && break
    echo "redis-server exited at start (try $try, port $port)" >&2
    wait "$pid" || :
    pid=
    rm -f server.pid
done
[ -n "$pid" ] || { echo "redis-server would not start" >&2; tail -n 20 server.log >&2; exit 1; }
# The server answering is ours, and it is preloaded exactly when it should be.
[ "$(cli info server | tr -d '\r' | sed -n 's/^process_id://p')" = "$pid" ] ||
    { echo "port $port: not our redis-server" >&2; exit 1; }
if [ -n "$SERVER_PRELOAD" ]; then
    grep -qF "/$(basename "$SERVER_PRELOAD")" "/proc/$pid/maps" ||
        { echo "redis-server $pid: $SERVER_PRELOAD not mapped" >&2; exit 1; }
elif grep -q '/libtally[^/]*\.so' "/proc/$pid/maps"; then
    echo "redis-server $pid: libtally mapped in the plain run" >&2
    exit 1
fi

echo "load: $(cli <"$IN/redis-load.txt" | cksum)"
rc=0
redis-benchmark -h 127.0.0.1 -p "$port" -n 20000 -c 20 -q \
    -t set,get,incr,lpush,lpop,sadd,hset >&2 || rc=$?
echo "redis-benchmark exit status $rc"
alive || { echo "redis-server died under load" >&2; exit 1; }
echo "server alive: $(cli ping)"
[ "$rc" -eq 0 ]
cli <"$IN/redis-query.txt"
cli info memory | tr -d '\r' | sed -n 's/^mem_allocator://p' >mem_allocator
cli flushall
cli dbsize
echo "reload: $(cli <"$IN/redis-load.txt" | cksum)"
cli debug digest
cli shutdown nosave || :
src=0
wait "$pid" || src=$?
pid=
rm -f server.pid
echo "server exit status $src"
EOF
check redis server
for mode in plain tally; do
    [ ! -s "$TMP/redis.$mode/mem_allocator" ] ||
        echo "    redis $mode: mem_allocator $(cat "$TMP/redis.$mode/mem_allocator") (build-time name, not compared)"
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
