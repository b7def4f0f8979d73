#!/bin/bash
# bench/features.sh: what consumer groups, partitioning and transactions cost against the
# single-node figure (issue 8: "each reports its own cost against the single-node
# figure"), measured in one run against one mqd.
#
# Cases (durable 1 KiB, flush = sync, window WINDOW; each case on its own fresh topic):
#   send       send to a 1-partition topic: the single-node figure the txn cases compare to
#   both       send + receive, shared (queue) consumption: what group/keys8 compare to
#   group      send + receive through a consumer group (T/ConsumerGroups/g)
#   keys8      send + receive, 8 partitions, 64 partition keys (8 group commits in parallel)
#   txnKxC     transactions of K transactional sends each, on C connections at once
#              (declare, K sends settled accepted, discharge commit)
# REPS interleaved repetitions, medians reported. Loopback only; stops only the mqd it
# started (by PID); every run is bounded (--duration-cap) and runs under `flock $LOCK`
# (shared with the other benchmarks). Writes bench/results/features-DATE.md.
#
# Environment (defaults in brackets):
#   MQD [build/mqd]  BENCH [mqd-bench next to MQD]  REPS [3]  COUNT [200000]
#   TXN_MSGS [40000] messages per txn case (transactions = TXN_MSGS / K, at most TXN_MAX)
#   TXN_MAX [4000]
#   WINDOW [1000]  PORT [47351]  RUN_CAP [60]  LOCK [/tmp/mqd-bench.lock]  LOCK_WAIT [900]
#   CASES [all: "send both group keys8 txn1x1 txn1x8 txn10x8 txn100x1 txn100x8"]
set -euo pipefail

cd "$(dirname "$0")/.."
. bench/lib.sh
MQD=${MQD:-build/mqd}
BENCH=${BENCH:-$(dirname "$MQD")/mqd-bench}
REPS=${REPS:-3}
COUNT=${COUNT:-200000}
TXN_MSGS=${TXN_MSGS:-40000}
TXN_MAX=${TXN_MAX:-4000}
WINDOW=${WINDOW:-1000}
PORT=${PORT:-47351}
RUN_CAP=${RUN_CAP:-60}
LOCK=${LOCK:-/tmp/mqd-bench.lock}
LOCK_WAIT=${LOCK_WAIT:-900}
CASES=${CASES:-send both group keys8 txn1x1 txn1x8 txn10x8 txn100x1 txn100x8}
STAMP=$(date +%Y%m%d-%H%M%S)
OUT_MD=bench/results/features-$STAMP.md
TMP=$(mktemp -d /tmp/mqd-features.XXXXXX)
MQD_PID=

log() { echo "features: $*" >&2; }
cleanup() { stop_pid "$MQD_PID" 10; rm -rf "$TMP"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

[ -x "$MQD" ] && [ -x "$BENCH" ] || { log "need MQD ($MQD) and BENCH ($BENCH)"; exit 1; }

start_mqd() {
	local sets=() r
	for r in $(seq "$REPS"); do sets+=(--set "topic.keys8-$r.partitions=8"); done
	mkdir -p "$TMP/data"
	setsid "$MQD" --foreground --listen "127.0.0.1:$PORT" --data-dir "$TMP/data" "${sets[@]}" \
		>>"$TMP/mqd.log" 2>&1 </dev/null &
	MQD_PID=$!
	wait_port "$PORT" 20 || { log "mqd did not start"; tail -5 "$TMP/mqd.log" >&2; exit 1; }
}

describe() {
	case $1 in
	send) echo "send, 1 partition (single-node figure)" ;;
	both) echo "send + receive, shared (queue) consumer" ;;
	group) echo "send + receive, consumer group" ;;
	keys8) echo "send + receive, 8 partitions, 64 keys" ;;
	txn*) local k=${1#txn}; echo "transactions of ${k%x*} sends, ${k#*x} connection(s)" ;;
	esac
}

baseline() { case $1 in send | txn*) echo send ;; *) echo both ;; esac; }

run_case() { # run_case CASE REP
	local c=$1 r=$2 t="$1-$2" args=() line
	case $c in
	send) args=(send --count "$COUNT") ;;
	both) args=(both --count "$COUNT") ;;
	group) args=(both --count "$COUNT" --source "$t/ConsumerGroups/g") ;;
	keys8) args=(both --count "$COUNT" --keys 64) ;;
	txn*x*)
		local k=${c#txn} n
		n=$((TXN_MSGS / ${k%x*}))
		[ "$n" -gt "$TXN_MAX" ] && n=$TXN_MAX
		args=(txn --count "$n" --txn-msgs "${k%x*}" --connections "${k#*x}") ;;
	*) log "unknown case $c"; return 0 ;;
	esac
	kill -0 "$MQD_PID" 2>/dev/null || { log "mqd died; restarting"; start_mqd; }
	flock -w "$LOCK_WAIT" "$LOCK" timeout $((RUN_CAP + 30)) "$BENCH" "${args[@]}" --address "$t" \
		--url "amqp://127.0.0.1:$PORT" --size 1024 --durable --window "$WINDOW" \
		--duration-cap "$RUN_CAP" --broker-pid "$MQD_PID" --quiet >"$TMP/run-$c-$r.txt" 2>&1 || true
	line=$(grep '^RESULT ' "$TMP/run-$c-$r.txt" || echo "RESULT msgs=0 complete=0")
	echo "$c ${line#RESULT }" >>"$TMP/results"
	log "$c #$r: $(echo "$line" | grep -o 'msgs_per_s=[^ ]*\|p99_ms=[^ ]*\|complete=[^ ]*' | tr '\n' ' ')"
}

start_mqd
for r in $(seq "$REPS"); do
	for c in $CASES; do run_case "$c" "$r"; done
done

{
	echo "# mqd: cost of consumer groups, partitions and transactions ($STAMP)"
	echo
	echo "\`bench/features.sh\` (REPS=$REPS, COUNT=$COUNT, TXN_MSGS=$TXN_MSGS, TXN_MAX=$TXN_MAX, window $WINDOW): durable 1 KiB,"
	echo "flush = sync, one mqd, a fresh topic per case and repetition, medians of $REPS."
	echo "Latency: send->accepted (send), send->receive (both), declare->discharge (txn)."
	echo
	machine_line
	echo "- mqd: $("$MQD" --version 2>&1 | head -1)"
	echo
	echo "| case | what | msgs/s | vs | ratio | p50 ms | p99 ms | broker CPU % | complete |"
	echo "|---|---|---:|---|---:|---:|---:|---:|---:|"
	for c in $CASES; do
		b=$(baseline "$c")
		v=$(median_of "$TMP/results" msgs_per_s "$c")
		bv=$(median_of "$TMP/results" msgs_per_s "$b")
		done_n=$(awk -v c="$c" '$1 == c && /complete=1/' "$TMP/results" | wc -l)
		echo "| $c | $(describe "$c") | $(fmt "$v" 0) | $b | $(ratio "$v" "$bv") |" \
			"$(fmt "$(median_of "$TMP/results" p50_ms "$c")" 2) | $(fmt "$(median_of "$TMP/results" p99_ms "$c")" 2) |" \
			"$(fmt "$(median_of "$TMP/results" broker_cpu_pct "$c")" 0) | $done_n/$REPS |"
	done
	echo
	echo "Raw RESULT lines:"
	echo
	sed 's/^/    /' "$TMP/results"
} >"$OUT_MD"
cat "$OUT_MD"
log "wrote $OUT_MD"
