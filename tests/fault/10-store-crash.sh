#!/bin/bash
# Store crash test: a flush=sync writer is SIGKILLed at random moments; after each kill
# a checker reopens the log (recovery) and verifies that every offset the writer was
# told was stable is readable with the same bytes. The writer then continues. Every
# other round the writer keeps zeros ahead of its records (segment_prezero), so the
# kill leaves a pre-zeroed tail for recovery to cut.
# With MQD_CRASH_POWERCUT=1 (25-powercut-store.sh) the data dir is on powercutfs and each
# kill is followed by a power cut (every other round cut-torn) and a remount.
# Env: MQD_BUILDDIR (build dir), MQD_CRASH_ROUNDS (default 25), MQD_CRASH_SEED.
set -u
B=${MQD_BUILDDIR:-.}
W=$B/tests/fault/store_crash_writer
C=$B/tests/fault/store_crash_check
FS=$B/tests/fault/powercutfs
ROUNDS=${MQD_CRASH_ROUNDS:-25}
RANDOM=${MQD_CRASH_SEED:-$$}
PC=${MQD_CRASH_POWERCUT:-}
name=10-store-crash
[ -n "$PC" ] && name=25-powercut-store
if [ -n "$PC" ]; then
    [ -x "$FS" ] || { echo "SKIP: powercutfs is not built"; exit 77; }
    [ "$(id -u)" -eq 0 ] && [ -e /dev/fuse ] || { echo "SKIP: needs root and /dev/fuse"; exit 77; }
fi
for p in "$W" "$C"; do
    [ -x "$p" ] || { echo "$name: missing $p (build check programs first)"; exit 1; }
done
DIR=$(mktemp -d /tmp/mqd-crash-XXXXXX)
DATA=$DIR/data
fspid=
mount_fs() {
    "$FS" "$DIR/backing" "$DIR/mnt" -f >>"$DIR/pcfs.log" 2>&1 &
    fspid=$!
    for _ in $(seq 1 300); do
        grep -q " $DIR/mnt " /proc/mounts && return 0
        sleep 0.02
    done
    echo "$name: powercutfs did not mount"; cat "$DIR/pcfs.log"; exit 1
}
unmount_fs() {
    umount "$DIR/mnt" 2>/dev/null
    for _ in $(seq 1 500); do kill -0 "$fspid" 2>/dev/null || break; sleep 0.02; done
    kill -9 "$fspid" 2>/dev/null && umount -l "$DIR/mnt" 2>/dev/null
    wait "$fspid" 2>/dev/null
    fspid=
}
trap '[ -n "$fspid" ] && unmount_fs; rm -rf "$DIR"' EXIT
if [ -n "$PC" ]; then
    mkdir -p "$DIR/backing" "$DIR/mnt"
    DATA=$DIR/mnt/data
    mount_fs
fi
OUT=$DIR/promises.txt
: > "$OUT"
for ((i = 1; i <= ROUNDS; i++)); do
    zero=""
    ((i % 2)) && zero=65536
    "$W" "$DATA" $zero >> "$OUT" 2>"$DIR/writer.err" &
    pid=$!
    # Sleep 20..600 ms (100..900 on powercutfs), then kill without warning.
    if [ -n "$PC" ]; then
        sleep "0.$(printf '%03d' $((100 + RANDOM % 800)))"
    else
        sleep "0.$(printf '%03d' $((20 + RANDOM % 580)))"
    fi
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    if [ -s "$DIR/writer.err" ]; then
        echo "$name: round $i: writer error:"; cat "$DIR/writer.err"; exit 1
    fi
    how=""
    if [ -n "$PC" ]; then
        how=cut
        ((i % 2 == 0)) && how="cut-torn $RANDOM"
        how="$how, $(grep dirty_files "$DIR/mnt/.powercut" | cut -d' ' -f2) dirty files"
        echo "${how%%,*}" > "$DIR/mnt/.powercut"
        unmount_fs
        mount_fs
        how=" ($how)"
    fi
    if ! res=$("$C" "$DATA" "$OUT" 2>&1); then
        echo "$name: FAILED after round $i$how:"; echo "$res"; exit 1
    fi
    echo "round $i$how: $res"
done
echo "$name: $ROUNDS rounds passed"
exit 0
