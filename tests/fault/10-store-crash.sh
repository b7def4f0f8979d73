#!/bin/bash
# Store crash test: a flush=sync writer is SIGKILLed at random moments; after each kill
# a checker reopens the log (recovery) and verifies that every offset the writer was
# told was stable is readable with the same bytes. The writer then continues. Every
# other round the writer keeps zeros ahead of its records (segment_prezero), so the
# kill leaves a pre-zeroed tail for recovery to cut.
# Env: MQD_BUILDDIR (build dir), MQD_CRASH_ROUNDS (default 25), MQD_CRASH_SEED.
set -u
B=${MQD_BUILDDIR:-.}
W=$B/tests/fault/store_crash_writer
C=$B/tests/fault/store_crash_check
ROUNDS=${MQD_CRASH_ROUNDS:-25}
RANDOM=${MQD_CRASH_SEED:-$$}
for p in "$W" "$C"; do
    [ -x "$p" ] || { echo "10-store-crash: missing $p (build check programs first)"; exit 1; }
done
DIR=$(mktemp -d /tmp/mqd-crash-XXXXXX)
trap 'rm -rf "$DIR"' EXIT
OUT=$DIR/promises.txt
: > "$OUT"
for ((i = 1; i <= ROUNDS; i++)); do
    zero=""
    ((i % 2)) && zero=65536
    "$W" "$DIR/data" $zero >> "$OUT" 2>"$DIR/writer.err" &
    pid=$!
    # Sleep 20..600 ms, then kill without warning.
    sleep "0.$(printf '%03d' $((20 + RANDOM % 580)))"
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    if [ -s "$DIR/writer.err" ]; then
        echo "10-store-crash: round $i: writer error:"; cat "$DIR/writer.err"; exit 1
    fi
    if ! res=$("$C" "$DIR/data" "$OUT" 2>&1); then
        echo "10-store-crash: FAILED after round $i:"; echo "$res"; exit 1
    fi
    echo "round $i: $res"
done
echo "10-store-crash: $ROUNDS rounds passed"
exit 0
