#!/bin/bash
# The store crash test across power cuts: 10-store-crash's flush=sync writer, with its
# data dir on powercutfs, is SIGKILLed at random moments; then the file system is cut
# (every other round cut-torn: a random prefix of the unsynced writes in 512-byte
# sectors), remounted, and the checker verifies that every offset the writer was told
# was stable is readable with the same bytes. Exit 77 without root or FUSE.
# Env: MQD_BUILDDIR, MQD_PC_STORE_ROUNDS (default 10), MQD_CRASH_SEED.
set -u
B=${MQD_BUILDDIR:-.}
W=$B/tests/fault/store_crash_writer
C=$B/tests/fault/store_crash_check
FS=$B/tests/fault/powercutfs
ROUNDS=${MQD_PC_STORE_ROUNDS:-10}
RANDOM=${MQD_CRASH_SEED:-$$}
[ -x "$FS" ] || { echo "SKIP: powercutfs is not built"; exit 77; }
[ "$(id -u)" -eq 0 ] && [ -e /dev/fuse ] || { echo "SKIP: needs root and /dev/fuse"; exit 77; }
for p in "$W" "$C"; do
    [ -x "$p" ] || { echo "25-powercut-store: missing $p (build check programs first)"; exit 1; }
done
DIR=$(mktemp -d /tmp/mqd-pcstore-XXXXXX)
MNT=$DIR/mnt
mkdir -p "$DIR/backing" "$MNT"
fspid=
mount_fs() {
    "$FS" "$DIR/backing" "$MNT" -f >>"$DIR/pcfs.log" 2>&1 &
    fspid=$!
    for _ in $(seq 1 300); do
        mountpoint -q "$MNT" 2>/dev/null || grep -q " $MNT " /proc/mounts && return 0
        sleep 0.02
    done
    echo "25-powercut-store: powercutfs did not mount"; cat "$DIR/pcfs.log"; exit 1
}
unmount_fs() {
    umount "$MNT" 2>/dev/null
    for _ in $(seq 1 500); do kill -0 "$fspid" 2>/dev/null || break; sleep 0.02; done
    kill -9 "$fspid" 2>/dev/null && umount -l "$MNT" 2>/dev/null
    wait "$fspid" 2>/dev/null
    fspid=
}
trap '[ -n "$fspid" ] && unmount_fs; rm -rf "$DIR"' EXIT
mount_fs
OUT=$DIR/promises.txt
: > "$OUT"
for ((i = 1; i <= ROUNDS; i++)); do
    zero=""
    ((i % 2)) && zero=65536
    "$W" "$MNT/data" $zero >> "$OUT" 2>"$DIR/writer.err" &
    pid=$!
    sleep "0.$(printf '%03d' $((100 + RANDOM % 800)))"
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    if [ -s "$DIR/writer.err" ]; then
        echo "25-powercut-store: round $i: writer error:"; cat "$DIR/writer.err"; exit 1
    fi
    cmd=cut
    ((i % 2 == 0)) && cmd="cut-torn $RANDOM"
    dirty=$(grep dirty_files "$MNT/.powercut" | cut -d' ' -f2)
    echo "$cmd" > "$MNT/.powercut"
    unmount_fs
    mount_fs
    if ! res=$("$C" "$MNT/data" "$OUT" 2>&1); then
        echo "25-powercut-store: FAILED after round $i ($cmd):"; echo "$res"; exit 1
    fi
    echo "round $i ($cmd, $dirty dirty files): $res"
done
echo "25-powercut-store: $ROUNDS rounds passed"
exit 0
