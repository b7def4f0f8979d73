#!/bin/bash
# The long power-cut runs (issue 23; not run by `make check`): each power-cut loop run to
# ROUNDS power cuts (default 200), one loop after another, and a line of totals per loop
# appended to the results file. Exits non-zero if any loop failed (a lost acknowledged
# message, a torn transaction, an offset ahead of consumption, or any other failure of
# the loop's own checks) or did not reach ROUNDS cuts.
#
#   tests/fault/longrun.sh [ROUNDS [LOOP...]]     LOOP: 21 22 23 24 25 26 (default 21..25)
#
# How each loop gets to ROUNDS cuts, without changing what CI runs:
#   21  MQD_PC_ROUNDS=ROUNDS (a new topic per round; every other cut torn)
#   22  08-restart-durability, 3 cuts per body: MQD_TEST_REPEAT=ceil(ROUNDS/3),
#       MQD_PC_MODE=torn (CI: plain cuts only) so that every other cut is torn
#   23  43-group-restart, 1 cut per body: MQD_TEST_REPEAT=ROUNDS (cut and cut-torn alternate)
#   24  62-txn-crash: MQD_TXN_ROUNDS=ROUNDS
#   25  the store crash writer: MQD_PC_STORE_ROUNDS=ROUNDS
#   26  26-powercut-eio (1 cut per run): run ROUNDS times (try 20)
# Each loop runs under `nice -n 5` and `timeout` (MQD_LONGRUN_TIMEOUT seconds per loop,
# default 60 per round), so a hang ends the loop as a failure.
# Env: MQD_BUILDDIR (default ./build), MQD_LONGRUN_DIR (logs and results.txt; default a new
# /tmp/mqd-longrun-XXXXXX, kept), MQD_PC_SEED (cut-torn seeds and 21's randomness; default
# the time). A failing loop's temp dir is kept by the test (its log names it).
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
ROUNDS=${1:-200}
shift 2>/dev/null
LOOPS=${*:-21 22 23 24 25}
export MQD_BUILDDIR=${MQD_BUILDDIR:-$src/build}
export MQD_SRCDIR=$src
MQD_BUILDDIR=$(cd "$MQD_BUILDDIR" && pwd) || exit 2
OUTDIR=${MQD_LONGRUN_DIR:-$(mktemp -d /tmp/mqd-longrun-XXXXXX)}
mkdir -p "$OUTDIR"
RES=$OUTDIR/results.txt
SEED=${MQD_PC_SEED:-$(date +%s)}
commit=$(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$src" diff --quiet HEAD 2>/dev/null || commit="$commit+dirty"
PY=/usr/bin/python3

# count LOG REGEX: matching lines
count() { grep -cE "$2" "$1"; }
# sum LOG REGEX: sum of the first number captured by sed's REGEX (one group)
sum() { sed -nE "s/$2/\1/p" "$1" | awk '{ s += $1 } END { print s + 0 }'; }

run_loop() {
    local n=$1 log=$OUTDIR/$1.log cmd rc t0 wall limit
    limit=${MQD_LONGRUN_TIMEOUT:-$((60 * ROUNDS + 600))}
    # shellcheck disable=SC2016 # expanded by the inner bash
    local repeat26='for i in $(seq 1 "$1"); do echo "=== run $i"; "$2" "$3" || exit 1; done'
    case $n in
    21) cmd=(env MQD_PC_ROUNDS="$ROUNDS" MQD_PC_SEED="$SEED" "$PY" "$here/21-powercut-broker.py") ;;
    22) cmd=(env MQD_TEST_REPEAT=$(((ROUNDS + 2) / 3)) MQD_PC_MODE=torn MQD_PC_SEED="$SEED"
             "$PY" "$here/22-powercut-restart.py") ;;
    23) cmd=(env MQD_TEST_REPEAT="$ROUNDS" MQD_PC_SEED="$SEED" "$PY" "$here/23-powercut-group.py") ;;
    24) cmd=(env MQD_TXN_ROUNDS="$ROUNDS" MQD_TXN_SEED=$((SEED & 0xffff)) MQD_PC_SEED="$SEED"
             "$PY" "$here/24-powercut-txn.py") ;;
    25) cmd=(env MQD_PC_STORE_ROUNDS="$ROUNDS" MQD_CRASH_SEED=$((SEED & 0x7fff))
             bash "$here/25-powercut-store.sh") ;;
    26) cmd=(bash -c "$repeat26" _ "$ROUNDS" "$PY" "$here/26-powercut-eio.py") ;;
    *) echo "longrun: no loop $n" >&2; return 2 ;;
    esac
    echo "$(date -u +%FT%TZ) loop $n: ${cmd[*]}" | tee -a "$RES"
    t0=$(date +%s)
    timeout -k 30 "$limit" nice -n 5 "${cmd[@]}" >"$log" 2>&1
    rc=$?
    wall=$(($(date +%s) - t0))
    summarize "$n" "$log" "$rc" "$wall" | tee -a "$RES"
    [ "$rc" -eq 0 ] && [ "$(cat "$OUTDIR/$n.cuts")" -ge "$ROUNDS" ]
}

# summarize LOOP LOG RC WALL: one line of totals
summarize() {
    local n=$1 log=$2 rc=$3 wall=$4 cuts torn what lost
    case $n in
    21) cuts=$(count "$log" '\] pc round [0-9]+: .*SIGKILL and cut')
        torn=$(count "$log" '\] pc round [0-9]+: .*SIGKILL and cut-torn')
        what="$(sum "$log" '.*\] pc: [0-9]+ rounds: ([0-9]+) accepted messages.*') accepted messages in $cuts new topics"
        lost=$(sum "$log" '.*\] pc: [0-9]+ rounds: .* ([0-9]+) lost$')
        what="$what; check of the checker: $(sed -nE 's/.*\] (n[sc]: .*)/\1/p' "$log" | tr '\n' ';')" ;;
    22|23|24)
        cuts=$(count "$log" '\] broker [^ ]+: (power cut|cut-torn) #')
        torn=$(count "$log" '\] broker [^ ]+: cut-torn #')
        case $n in
        22) what="$(count "$log" 'PASS|\] repetition') bodies, $(( $(sum "$log" '.*\] ([0-9]+) durable messages accepted$') \
                 + $(sum "$log" '.*\] segment_prezero: .*; ([0-9]+) delivered$') )) accepted messages, each delivered after its restarts" ;;
        23) what="$(count "$log" '\] run 2: ') group restarts, $(sum "$log" '.*\] run 1: ([0-9]+) received.*') accepted before the kills, resumed at the last commit $(count "$log" '\] run 2: ') times with $(sum "$log" '.*\] duplicates after the crash: ([0-9]+) .*') redelivered in all" ;;
        24) what=$(sed -nE 's/.*\] RESULT: (.*)/\1/p' "$log") ;;
        esac
        lost=$(count "$log" 'ANOMALY|^FAIL') ;;
    25) cuts=$(count "$log" '^round [0-9]+ \(cut')
        torn=$(count "$log" '^round [0-9]+ \(cut-torn')
        # a round's check line may follow the checker's own log line (recovery's notes)
        what="$(sed -nE 's/.*check: ([0-9]+) promises.*/\1/p' "$log" | tail -1) stable offsets checked (cumulative)"
        lost=$(sum "$log" '.*check: [0-9]+ promises, ([0-9]+) bad.*') ;;
    26) cuts=$(count "$log" '\] broker [^ ]+: (power cut|cut-torn) #')
        torn=$(count "$log" '\] broker [^ ]+: cut-torn #')
        what="$(count "$log" '^PASS') of $(count "$log" '^=== run') runs passed"
        lost=$(count "$log" '^FAIL') ;;
    esac
    echo "$cuts" >"$OUTDIR/$n.cuts"
    printf 'loop %s: exit %s, %s s, commit %s, seed %s: %s cuts (%s cut, %s cut-torn); %s; lost/anomalies %s\n' \
        "$n" "$rc" "$wall" "$commit" "$SEED" "$cuts" $((cuts - torn)) "$torn" "$what" "${lost:-?}"
}

if [ "${MQD_LONGRUN_SUMMARIZE:-}" ]; then
    # re-read logs of loops run before: MQD_LONGRUN_SUMMARIZE="LOOP LOG RC WALL"
    # shellcheck disable=SC2086
    summarize $MQD_LONGRUN_SUMMARIZE
    exit 0
fi
echo "longrun: $ROUNDS cuts per loop, loops $LOOPS, logs in $OUTDIR" | tee -a "$RES"
status=0
for n in $LOOPS; do
    run_loop "$n" || { status=1; echo "loop $n: FAILED (see $OUTDIR/$n.log)" | tee -a "$RES"; }
done
echo "longrun: $([ $status -eq 0 ] && echo "all loops passed" || echo "FAILURES") ($RES)" | tee -a "$RES"
exit $status
