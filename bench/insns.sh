#!/bin/bash
# bench/insns.sh MQD_BIN BENCH_BIN MODE SIZE N: the broker's user-space instructions per
# message (callgrind, all threads): immune to the machine's noise, so a change's cost can
# be compared where wall-clock figures swing by ±10 % (bench/results/core-insns-*.md).
#   MODE send: N durable SIZE-byte sends; recv: N stored messages read from `first`.
# The broker starts under callgrind on a free loopback port with a fresh data dir; a
# 2,000-message warm-up send runs first, then the counters are zeroed, the workload runs
# (mqd-bench, 1 connection x 1 link, window 1000) and the counters are dumped: the dump's
# total Ir / N is printed as per_msg. Needs valgrind (callgrind_control).
set -eu
[ $# -eq 5 ] || { sed -n 2,8p "$0"; exit 2; }
mqd=$1 bench=$2 mode=$3 size=$4 n=$5
d=$(mktemp -d /tmp/mqd-insns.XXXX)
port=$((20000 + RANDOM % 20000))
valgrind --tool=callgrind --callgrind-out-file="$d/cg.%p" \
    "$mqd" --foreground --listen 127.0.0.1:$port --data-dir "$d/data" >"$d/log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; rm -rf "$d"' EXIT
for _ in $(seq 150); do grep -q "listening" "$d/log" 2>/dev/null && break; sleep 0.2; done
url=amqp://127.0.0.1:$port
run() { timeout 600 "$bench" "$@" --url $url --address t --size "$size" --window 1000 --quiet; }
run send --count 2000 --durable >/dev/null 2>&1
[ "$mode" = recv ] && run send --count "$n" --durable >/dev/null 2>&1
callgrind_control -z $pid >/dev/null
case $mode in
send) run send --count "$n" --durable >"$d/b.out" 2>&1 ;;
recv) run recv --offset-spec first --count "$n" >"$d/b.out" 2>&1 ;;
*) echo "mode: send or recv" >&2; exit 2 ;;
esac
callgrind_control -d $pid >/dev/null
sleep 0.5
tot=$(awk '/^(summary|totals):/ {print $2; exit}' "$d/cg.$pid.1")
echo "$(basename "$mqd") $mode size=$size n=$n Ir=$tot per_msg=$((tot / n))"
