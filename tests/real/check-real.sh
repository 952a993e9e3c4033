#!/bin/sh
# check-real.sh - run real programs under tally and compare their output.
#
#   sh tests/real/check-real.sh /abs/path/to/libtally.so     (make check-real)
#
# Unit tests exercise tally through its API; this checks that it can stand in
# for glibc malloc under large, real, allocation-heavy programs. Each workload
# below (python3, sqlite3, git, perl, gcc) runs twice in fresh directories:
# once plainly and once with LD_PRELOAD=libtally.so (inherited by every child
# process: git's helpers, gcc's cc1/as/ld, ...). The workloads are
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
missing=
for tool in python3:python3 sqlite3:sqlite3 perl:perl git:git gcc:gcc \
            size:binutils objdump:binutils nm:binutils timeout:coreutils \
            diff:diffutils awk:mawk; do
    command -v "${tool%%:*}" >/dev/null 2>&1 && continue
    case " $missing " in *" ${tool#*:} "*) ;; *) missing="$missing ${tool#*:}" ;; esac
done
if [ -n "$missing" ]; then
    if [ "$(id -u)" = 0 ]; then
        echo "check-real: installing$missing"
        apt-get update -qq
        # shellcheck disable=SC2086
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
    else
        echo "check-real: missing packages:$missing. Run:" >&2
        echo "  sudo apt-get update && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq$missing" >&2
        exit 1
    fi
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/check-real.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
trap 'exit 130' INT TERM
IN=$TMP/in
mkdir "$IN"
export IN PYTHONHASHSEED=0 LC_ALL=C TZ=UTC
unset LD_PRELOAD 2>/dev/null || true

passed=0
failed=0
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

# run_one MODE NAME: runs $IN/NAME.sh with `sh -eu` in a fresh directory
# $TMP/NAME.MODE; stdout, then the exit status, go to $TMP/NAME.MODE.out,
# stderr to $TMP/NAME.MODE.err.
run_one() {
    dir=$TMP/$2.$1
    mkdir "$dir"
    rc=0
    if [ "$1" = tally ]; then
        (cd "$dir" && LD_PRELOAD=$LIB timeout "$TIMEOUT" sh -eu "$IN/$2.sh") \
            >"$dir.out" 2>"$dir.err" || rc=$?
    else
        (cd "$dir" && timeout "$TIMEOUT" sh -eu "$IN/$2.sh") \
            >"$dir.out" 2>"$dir.err" || rc=$?
    fi
    echo "exit status $rc" >>"$dir.out"
}

# check NAME: runs workload NAME plainly and under tally and compares.
check() {
    t0=$(now); run_one plain "$1"
    t1=$(now); run_one tally "$1"
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

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
