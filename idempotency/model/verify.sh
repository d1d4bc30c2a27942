#!/bin/sh
# verify.sh: `make model`. Checks oncepay.pml with spin, exhaustively (no
# bitstate), with partial order reduction:
#   1. the fixed protocol: no assertion violation, no invalid end state;
#   2. -DBUG1 (today's main): must violate invariant 2;
#   3. -DREOPEN_AS_FIRST, -DSTALL_BEFORE_CHARGE, -DRECHECK_NO_VERSION,
#      -DREFUSE_RELEASES and -DPERSIST_NO_OWNER (the holes the model and
#      reviewers found, README): must violate an invariant;
#   4. -DPROBE=n for every REACH(n, …) in the model: each reachability probe
#      must be reached, so the model cannot silently become vacuous.
# Build products go to a temporary directory, removed on success and kept
# (its path printed) on failure. Exit status: 0 when all of the above hold.
#
# Environment: SPIN (spin), CC (gcc), PANFLAGS (pan's flags for the full
# search, default -m10000 -w24), KEEP=1 keeps the directory.
set -eu

SPIN=${SPIN:-spin}
CC=${CC:-gcc}
PANFLAGS=${PANFLAGS:--m10000 -w24}
here=$(cd "$(dirname "$0")" && pwd)
model=$here/oncepay.pml

command -v "$SPIN" >/dev/null 2>&1 || { echo "model: $SPIN not found (apt-get install spin)" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/oncepay-model.XXXXXX")
status=0
cleanup() {
	rc=$?
	if [ "$rc" -ne 0 ] || [ "$status" -ne 0 ] || [ "${KEEP:-0}" = 1 ]; then
		echo "model: build products and trails kept in $work"
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT

# build NAME OPT [SPIN -D flags...]: spin -a and gcc in $work/NAME.
build() {
	name=$1 opt=$2
	shift 2
	mkdir -p "$work/$name"
	cp "$model" "$work/$name/oncepay.pml"
	(cd "$work/$name" &&
		"$SPIN" -a "$@" oncepay.pml >spin.out 2>&1 &&
		$CC "$opt" -DSAFETY -o pan pan.c >cc.out 2>&1) || {
		echo "model: $name: could not build the verifier:" >&2
		cat "$work/$name/spin.out" "$work/$name/cc.out" >&2
		return 1
	}
}

# violated NAME [SPIN -D flags...]: prints the line of oncepay.pml whose
# assertion the trail of NAME violates (empty if none).
violated() {
	name=$1
	shift
	[ -f "$work/$name/oncepay.pml.trail" ] || return 0
	(cd "$work/$name" && "$SPIN" -t "$@" oncepay.pml 2>&1) |
		sed -n 's/^spin: oncepay\.pml:\([0-9][0-9]*\), Error: assertion violated.*/\1/p' | head -n 1
}

# trail NAME [SPIN -D flags...]: the steps of NAME's trail, trimmed.
trail() {
	name=$1
	shift
	(cd "$work/$name" && "$SPIN" -t -p "$@" oncepay.pml 2>&1) |
		grep -vE '\[(\(1\)|else|skip|goto :b[0-9]+)\]|\[assert\(' | head -n 200
}

summary() { # the numbers of a pan run
	out=$work/$1/pan.out
	printf '%s states stored, %s transitions, depth %s, %s s, %s MB\n' \
		"$(sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p' "$out")" \
		"$(sed -n 's/^ *\([0-9.e+]*\) transitions.*/\1/p' "$out")" \
		"$(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' "$out")" \
		"$(sed -n 's/^pan: elapsed time \([0-9.e+]*\) seconds.*/\1/p' "$out")" \
		"$(sed -n 's/^ *\([0-9.]*\).total actual memory usage.*/\1/p' "$out")"
}

fail() {
	echo "model: FAIL: $*" >&2
	status=1
}

# 1. The fixed protocol: the full search must find nothing. It runs in the
# background (the longest job) while the quick searches below use the other
# core; its report is printed first.
fixed() {
	build fixed -O2 || return 1
	(cd "$work/fixed" && ./pan $PANFLAGS >pan.out 2>&1) || true
	if grep -q 'errors: 0$' "$work/fixed/pan.out" &&
		! grep -qE 'max search depth too small|Search not completed|invalid end state \(' "$work/fixed/pan.out"; then
		echo "model: fixed protocol: no violation, no invalid end state (exhaustive, partial order reduction)"
		echo "model:   $(summary fixed)"
	else
		echo "model: FAIL: the fixed protocol violates the model:"
		grep -E 'pan:|errors:' "$work/fixed/pan.out" || true
		trail fixed || true
		return 1
	fi
}
fixed >"$work/fixed.log" 2>&1 &
fixed_pid=$!

# The searches below stop at their first violation: -O0 builds faster, and a
# small hash table is enough.
QUICK="-m10000 -w20"

# 2. and 3. Variants that must violate an invariant. expect NAME WHAT FLAG:
# WHAT is the marker ("inv 2") the violated line must carry, or "" for any.
expect() {
	name=$1 what=$2 flag=$3
	build "$name" -O0 "$flag" || { status=1; return 0; }
	(cd "$work/$name" && ./pan $QUICK >pan.out 2>&1) || true
	line=$(violated "$name" "$flag")
	if [ -n "$line" ] && { [ -z "$what" ] || sed -n "${line}p" "$model" | grep -q "$what"; }; then
		echo "model: $flag: violates line $line as expected: $(sed -n "${line}p" "$model" | sed 's/^[[:space:]]*//')"
		echo "model:   $(summary "$name") to the violation"
	else
		fail "$flag must violate ${what:-an invariant}, but ${line:+line $line does:} ${line:-found nothing}"
		grep -E 'pan:|errors:' "$work/$name/pan.out" >&2 || true
	fi
}
expect bug1 'inv 2' -DBUG1 >"$work/expect.log" 2>&1
expect reopen-as-first '' -DREOPEN_AS_FIRST >>"$work/expect.log" 2>&1
expect stall-before-charge 'inv 2' -DSTALL_BEFORE_CHARGE >>"$work/expect.log" 2>&1
expect recheck-no-version 'inv 2' -DRECHECK_NO_VERSION >>"$work/expect.log" 2>&1
expect refuse-releases '' -DREFUSE_RELEASES >>"$work/expect.log" 2>&1
expect persist-no-owner '' -DPERSIST_NO_OWNER >>"$work/expect.log" 2>&1

# 4. Reachability probes.
reached=""
for n in $(sed -n 's/.*REACH(\([0-9][0-9]*\),.*/\1/p' "$model" | sort -n | uniq); do
	if build "probe$n" -O0 "-DPROBE=$n" >>"$work/expect.log" 2>&1; then
		(cd "$work/probe$n" && ./pan $QUICK >pan.out 2>&1) || true
	fi
	line=$(violated "probe$n" "-DPROBE=$n")
	if [ -n "$line" ] && sed -n "${line}p" "$model" | grep -q "REACH($n,"; then
		reached="$reached $n"
	else
		fail "probe $n ($(grep -n "REACH($n," "$model" | head -n 1)) is not reached: the model lost that path" >>"$work/expect.log" 2>&1
	fi
done

wait "$fixed_pid" || status=1
cat "$work/fixed.log" "$work/expect.log"
echo "model: reachability probes reached:$reached"

if [ "$status" -eq 0 ]; then
	echo "model: ok"
fi
exit "$status"
