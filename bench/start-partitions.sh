#!/bin/bash
# Time to start mqd with TOPICS x PARTS partitions (default 100 x 100 = 10,000).
# usage: MQD=build/mqd BENCH=build/mqd-bench [COLD=1] bench/start-partitions.sh
# Creates the topics with --set default_partitions=PARTS and one send each, stops mqd,
# starts it again and prints the time until the AMQP port accepts. Loopback only; stops
# only the mqd it started (by PID).
set -u
MQD=${MQD:-build/mqd}; BENCH=${BENCH:-build/mqd-bench}
TOPICS=${TOPICS:-100}; PARTS=${PARTS:-100}; PORT=${PORT:-47331}
D=$(mktemp -d /tmp/mqd-startparts.XXXXXX)
trap 'rm -rf "$D"' EXIT
ulimit -n "$(ulimit -Hn)" 2>/dev/null
wait_port() { for _ in $(seq 600); do (echo >/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && return 0; sleep 0.01; done; return 1; }
"$MQD" --foreground --listen 127.0.0.1:$PORT --data-dir "$D" --set default_partitions=$PARTS >"$D/log1" 2>&1 &
P=$!
wait_port || { echo "mqd did not start"; kill $P; exit 1; }
for t in $(seq 1 $TOPICS); do
  "$BENCH" send --url amqp://127.0.0.1:$PORT --address p$t --count $PARTS --keys $PARTS --size 64 --quiet >/dev/null || echo "send to p$t failed"
done
kill $P; wait $P
nseg=$(find "$D/topics" -name '*.log' | wc -l)
# COLD=1: start from an empty page cache (needs root; drops every clean cached page).
if [ "${COLD:-0}" = 1 ]; then sync; echo 3 > /proc/sys/vm/drop_caches || echo "cannot drop caches"; fi
t0=$(date +%s.%N)
"$MQD" --foreground --listen 127.0.0.1:$PORT --data-dir "$D" --set default_partitions=$PARTS >"$D/log2" 2>&1 &
P=$!
wait_port
t1=$(date +%s.%N)
rss=$(awk '/VmRSS/{print $2}' /proc/$P/status)
sleep 2
cpu=$(awk '{print $14+$15}' /proc/$P/stat)
echo "RESULT topics=$TOPICS partitions=$((TOPICS*PARTS)) segments=$nseg start_secs=$(echo "$t1 - $t0" | bc) rss_kib=$rss idle_cpu_ticks_2s_after_start=$cpu"
sleep 5
cpu2=$(awk '{print $14+$15}' /proc/$P/stat)
echo "idle CPU over 5 s after start: $(( cpu2 - cpu )) ticks (100/s)"
kill $P; wait $P
