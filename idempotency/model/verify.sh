#!/bin/sh
# verify.sh: `make model`. Checks oncepay.pml with spin, exhaustively (no
# bitstate), with partial order reduction:
#   1. the fixed protocol: no assertion violation, no invalid end state;
#   2. -DBUG1 (today's main): must violate invariant 2;
#   3. -DREOPEN_AS_FIRST and -DSTALL_BEFORE_CHARGE (the two holes the model
#      found, README "Findings"): must violate an invariant;
#   4. -DPROBE=1..10: each reachability probe must be reached, so the model
#      cannot silently become vacuous.
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
	if [ "$status" -ne 0 ] || [ "${KEEP:-0}" = 1 ]; then
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

# 1. The fixed protocol: the full search must find nothing.
build fixed -O2
(cd "$work/fixed" && ./pan $PANFLAGS >pan.out 2>&1) || true
if grep -q 'errors: 0$' "$work/fixed/pan.out" &&
	! grep -qE 'max search depth too small|Search not completed|invalid end state \(' "$work/fixed/pan.out"; then
	echo "model: fixed protocol: no violation, no invalid end state (exhaustive, partial order reduction)"
	echo "model:   $(summary fixed)"
else
	fail "the fixed protocol violates the model:"
	grep -E 'pan:|errors:' "$work/fixed/pan.out" >&2 || true
	trail fixed >&2 || true
fi

# 2. and 3. Variants that must violate an invariant. expect NAME WHAT FLAG:
# WHAT is the marker ("inv 2") the violated line must carry, or "" for any.
expect() {
	name=$1 what=$2 flag=$3
	build "$name" -O2 "$flag"
	(cd "$work/$name" && ./pan $PANFLAGS >pan.out 2>&1) || true
	line=$(violated "$name" "$flag")
	if [ -n "$line" ] && { [ -z "$what" ] || sed -n "${line}p" "$model" | grep -q "$what"; }; then
		echo "model: $flag: violates line $line as expected: $(sed -n "${line}p" "$model" | sed 's/^[[:space:]]*//')"
		echo "model:   $(summary "$name") to the violation"
	else
		fail "$flag must violate ${what:-an invariant}, but ${line:+line $line does:} ${line:-found nothing}"
		grep -E 'pan:|errors:' "$work/$name/pan.out" >&2 || true
	fi
}
expect bug1 'inv 2' -DBUG1
expect reopen-as-first '' -DREOPEN_AS_FIRST
expect stall-before-charge 'inv 2' -DSTALL_BEFORE_CHARGE

# 4. Reachability probes (quick searches: -O0 builds faster).
reached=""
for n in 1 2 3 4 5 6 7 8 9 10; do
	build "probe$n" -O0 "-DPROBE=$n"
	(cd "$work/probe$n" && ./pan $PANFLAGS >pan.out 2>&1) || true
	line=$(violated "probe$n" "-DPROBE=$n")
	if [ -n "$line" ] && sed -n "${line}p" "$model" | grep -q "REACH($n,"; then
		reached="$reached $n"
	else
		fail "probe $n ($(grep -n "REACH($n," "$model" | head -n 1)) is not reached: the model lost that path"
	fi
done
echo "model: reachability probes reached:$reached"

if [ "$status" -eq 0 ]; then
	echo "model: ok"
fi
exit "$status"
