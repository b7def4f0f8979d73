#!/bin/bash
# bench/compare.sh: run the same mqd-bench matrix against mqd and RabbitMQ (AMQP 1.0
# plugin) on this machine and write a markdown table with mqd/RabbitMQ ratios and a PNG
# chart into bench/results/compare-DATE.{md,png}.
#
# Matrix: profiles "durable 1 KiB" (header durable=true) and "non-durable 64 B" (mqd
# topics with flush=async); modes send, recv (drains what send wrote), both; REPS
# repetitions each, medians reported. Everything listens on 127.0.0.1 only; every process
# this script starts is stopped by its PID on exit. Bounded: each run has a
# --duration-cap, and once DEADLINE seconds have passed the remaining runs are skipped.
#
# Latency at a fixed rate (the issue's p99 targets): for each rate in LAT_RATES, REPS runs
# of `mqd-bench both --rate R` (durable 1 KiB, LAT_SECS seconds of messages, a fresh
# topic/queue each), and beside each mqd run the disk's own floor at that rate:
# `fsync-modes -r R` (one pwrite + fdatasync per group of due messages, no broker) in the
# directory mqd's data is in. RabbitMQ runs only the rates below 90 % of its durable
# end-to-end median from the matrix (above that its queue only grows).
#
# Environment (defaults in brackets):
#   MQD_BIN [build/mqd]         mqd binary
#   BENCH_BIN [build/mqd-bench, else next to MQD_BIN, else compiled from source into a temp dir]
#   REPS [3]  COUNT [100000]  WINDOW [1000]  RUN_CAP [45] (s per run)  DEADLINE [900] (s)
#   LAT_RATES ["10000 100000"] ("" skips the latency runs)  LAT_SECS [5]
#   FSYNC_MODES_BIN [build/bench/fsync-modes, else compiled from source into a temp dir]
#   MQD_PORT [47301]  RMQ_PORT [47302]  EPMD_PORT [47369]  DIST_PORT [47370]
#   NO_INSTALL=1   do not apt-get install rabbitmq-server / gnuplot-nox
#   ONLY=mqd|rabbitmq   run one broker only (table then has no ratios)
#   KEEP_TMP=1     keep the temp dir (broker logs, raw bench output)
set -euo pipefail

cd "$(dirname "$0")/.."
SRC_ROOT=$PWD
. bench/lib.sh # stop_pid, wait_port, ratio, fmt
MQD_BIN=${MQD_BIN:-build/mqd}
REPS=${REPS:-3}
COUNT=${COUNT:-100000}
WINDOW=${WINDOW:-1000}
RUN_CAP=${RUN_CAP:-45}
DEADLINE=${DEADLINE:-900}
LAT_RATES=${LAT_RATES-10000 100000}
LAT_SECS=${LAT_SECS:-5}
MQD_PORT=${MQD_PORT:-47301}
RMQ_PORT=${RMQ_PORT:-47302}
EPMD_PORT=${EPMD_PORT:-47369}
DIST_PORT=${DIST_PORT:-47370}
ONLY=${ONLY:-}
RMQ_NODE=mqdbench@localhost
RMQ_LIB=/usr/lib/rabbitmq/bin
PROFILES="durable1k small64"
MODES="send recv both"
START=$(date +%s)
STAMP=$(date +%Y%m%d-%H%M%S)
OUTDIR=$SRC_ROOT/bench/results
OUT_MD=$OUTDIR/compare-$STAMP.md
OUT_PNG=$OUTDIR/compare-$STAMP.png

TMP=$(mktemp -d /tmp/mqd-compare.XXXXXX)
MQD_PID= RMQ_SCRIPT_PID= RMQ_PID= EPMD_PID= MQD_RESTARTS=0

log() { echo "compare: $*" >&2; }

cleanup() {
	stop_pid "$MQD_PID" 10
	stop_pid "$RMQ_SCRIPT_PID" 30
	stop_pid "$RMQ_PID" 5
	stop_pid "$EPMD_PID" 2
	if [ -n "${KEEP_TMP:-}" ]; then log "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

install_deps() {
	[ -n "${NO_INSTALL:-}" ] && return 0
	local need=
	[ "$ONLY" != mqd ] && [ ! -x $RMQ_LIB/rabbitmq-server ] && need="$need rabbitmq-server"
	command -v gnuplot >/dev/null || need="$need gnuplot-nox"
	[ -z "$need" ] && return 0
	log "installing$need"
	# keep the distribution's service from starting (we start our own, loopback only)
	local policy=
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && policy=1
	fi
	apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
		--no-install-recommends $need >/dev/null || log "apt-get install$need failed"
	[ -n "$policy" ] && rm -f /usr/sbin/policy-rc.d
	return 0
}

find_fsync_modes() {
	local cand
	for cand in "${FSYNC_MODES_BIN:-}" build/bench/fsync-modes "$(dirname "$MQD_BIN")/bench/fsync-modes"; do
		[ -n "$cand" ] && [ -x "$cand" ] && { FSYNC_MODES_BIN=$cand; return 0; }
	done
	FSYNC_MODES_BIN=$TMP/fsync-modes
	log "compiling fsync-modes into $FSYNC_MODES_BIN"
	gcc -O2 -std=gnu11 -o "$FSYNC_MODES_BIN" bench/fsync-modes.c
}

find_bench() {
	local cand
	for cand in "${BENCH_BIN:-}" build/mqd-bench "$(dirname "$MQD_BIN")/mqd-bench"; do
		[ -n "$cand" ] && [ -x "$cand" ] && { BENCH_BIN=$cand; return 0; }
	done
	BENCH_BIN=$TMP/mqd-bench
	log "compiling mqd-bench into $BENCH_BIN"
	gcc -O2 -std=gnu11 -o "$BENCH_BIN" src/tools/mqd-bench.c -lqpid-proton -lm
}

# topic names: <profile>-<s|b>-<rep>; 64 B topics are flushed asynchronously
topic() { echo "$1-$2-$3"; }

start_mqd() {
	local sets=() r
	for r in $(seq "$REPS"); do
		sets+=(--set "topic.$(topic small64 s "$r").flush=async" --set "topic.$(topic small64 b "$r").flush=async")
	done
	mkdir -p "$TMP/mqd-data"
	setsid "$MQD_BIN" --foreground --listen "127.0.0.1:$MQD_PORT" --data-dir "$TMP/mqd-data" \
		"${sets[@]}" >>"$TMP/mqd.log" 2>&1 </dev/null &
	MQD_PID=$!
	wait_port "$MQD_PORT" 20 || { log "mqd did not start (see $TMP/mqd.log)"; tail -5 "$TMP/mqd.log" >&2; return 1; }
}

ensure_mqd() { # restart mqd if it died during the previous run (counted in the report)
	kill -0 "$MQD_PID" 2>/dev/null && return 0
	MQD_RESTARTS=$((MQD_RESTARTS + 1))
	log "mqd (pid $MQD_PID) is gone; restarting"
	start_mqd
}

rmq_env() {
	export HOME=$TMP/rmq RABBITMQ_NODENAME=$RMQ_NODE RABBITMQ_CONFIG_FILE=$TMP/rmq/rabbitmq.conf \
		RABBITMQ_ENABLED_PLUGINS_FILE=$TMP/rmq/enabled_plugins RABBITMQ_MNESIA_BASE=$TMP/rmq/mnesia \
		RABBITMQ_LOG_BASE=$TMP/rmq/log RABBITMQ_PID_FILE=$TMP/rmq/beam.pid ERL_EPMD_ADDRESS=127.0.0.1 \
		ERL_EPMD_PORT=$EPMD_PORT RABBITMQ_DIST_PORT=$DIST_PORT \
		RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
}

start_rabbitmq() {
	mkdir -p "$TMP/rmq"
	printf 'listeners.tcp.1 = 127.0.0.1:%s\nloopback_users = none\n' "$RMQ_PORT" >"$TMP/rmq/rabbitmq.conf"
	echo '[rabbitmq_amqp1_0].' >"$TMP/rmq/enabled_plugins"
	(rmq_env; exec epmd -address 127.0.0.1 -port "$EPMD_PORT" >"$TMP/epmd.log" 2>&1 </dev/null) &
	EPMD_PID=$!
	(rmq_env; exec setsid $RMQ_LIB/rabbitmq-server >"$TMP/rmq/server.log" 2>&1 </dev/null) &
	RMQ_SCRIPT_PID=$!
	(rmq_env; timeout 120 $RMQ_LIB/rabbitmqctl -n $RMQ_NODE wait --timeout 100 "$TMP/rmq/beam.pid") >/dev/null ||
		{ log "RabbitMQ did not start (see $TMP/rmq)"; return 1; }
	RMQ_PID=$(cat "$TMP/rmq/beam.pid")
	local names="" p k r
	for p in $PROFILES; do for k in s b; do for r in $(seq "$REPS"); do
		names="$names<<\"$(topic "$p" "$k" "$r")\">>,"
	done; done; done
	for p in $LAT_RATES; do for r in $(seq "$REPS"); do
		names="$names<<\"$(topic "lat$p" b "$r")\">>,"
	done; done
	# durable classic queues, addressed as /amq/queue/NAME by the AMQP 1.0 plugin
	(rmq_env; $RMQ_LIB/rabbitmqctl -n $RMQ_NODE eval "[rabbit_amqqueue:declare(rabbit_misc:r(<<\"/\">>, queue, N), true, false, [], none, <<\"bench\">>) || N <- [${names%,}]], ok.") >/dev/null
	RMQ_VERSION=$(rmq_env; $RMQ_LIB/rabbitmqctl -n $RMQ_NODE eval 'rabbit:base_product_version().' 2>/dev/null | tr -d '"' || echo '?')
}

stop_rabbitmq() {
	stop_pid "$RMQ_SCRIPT_PID" 30
	stop_pid "$RMQ_PID" 5
	stop_pid "$EPMD_PID" 2
	RMQ_SCRIPT_PID= RMQ_PID= EPMD_PID=
}

# run_one BROKER PROFILE MODE REP: appends "BROKER PROFILE MODE REP <RESULT fields>" to $TMP/results
run_one() {
	local b=$1 p=$2 m=$3 r=$4 url addr pid args=() line
	if (($(date +%s) - START > DEADLINE)); then log "deadline reached: skipping $b $p $m #$r"; return 0; fi
	case $p in durable1k) args=(--size 1024 --durable) ;; small64) args=(--size 64) ;; esac
	local t; t=$(topic "$p" "$([ "$m" = both ] && echo b || echo s)" "$r")
	if [ "$b" = mqd ]; then ensure_mqd; url=amqp://127.0.0.1:$MQD_PORT; addr=$t; pid=$MQD_PID
	else url=amqp://127.0.0.1:$RMQ_PORT; addr=/amq/queue/$t; pid=$RMQ_PID; fi
	[ "$m" = recv ] && args=(--size "${args[1]}")
	timeout $((RUN_CAP + 30)) "$BENCH_BIN" "$m" --url "$url" --address "$addr" --count "$COUNT" \
		--window "$WINDOW" --duration-cap "$RUN_CAP" --idle 5 --broker-pid "$pid" --quiet "${args[@]}" \
		>"$TMP/run-$b-$p-$m-$r.txt" 2>&1 || true
	line=$(grep '^RESULT ' "$TMP/run-$b-$p-$m-$r.txt" || echo "RESULT mode=$m msgs=0 complete=0")
	echo "$b $p $m $r ${line#RESULT }" >>"$TMP/results"
	log "$b $p $m #$r: ${line#RESULT }"
}

# run_lat BROKER RATE REP: a paced durable end-to-end run; for mqd also the disk's floor
# (appended as "floor latR - REP <fields>", p50_ms/p99_ms of fsync-modes' append mode)
run_lat() {
	local b=$1 rate=$2 r=$3 url addr pid line n=$(($2 * LAT_SECS))
	if (($(date +%s) - START > DEADLINE)); then log "deadline reached: skipping $b lat$rate #$r"; return 0; fi
	if [ "$b" = mqd ]; then
		line=$("$FSYNC_MODES_BIN" -r "$rate" -n "$n" -m append -d "$TMP/mqd-data" 2>&1 | awk '$1 == "append" {
			for (i = 1; i <= NF; i++) { if ($i == "p50") a = $(i + 1); if ($i == "p99") c = $(i + 1) }
			print "p50_ms=" a " p99_ms=" c }')
		echo "floor lat$rate - $r ${line:-p50_ms=na p99_ms=na}" >>"$TMP/results"
		log "floor lat$rate #$r: $line"
		ensure_mqd; url=amqp://127.0.0.1:$MQD_PORT; addr=$(topic "lat$rate" b "$r"); pid=$MQD_PID
	else url=amqp://127.0.0.1:$RMQ_PORT; addr=/amq/queue/$(topic "lat$rate" b "$r"); pid=$RMQ_PID; fi
	timeout $((RUN_CAP + 30)) "$BENCH_BIN" both --url "$url" --address "$addr" --count "$n" \
		--rate "$rate" --window "$WINDOW" --duration-cap "$RUN_CAP" --idle 5 --broker-pid "$pid" \
		--quiet --size 1024 --durable >"$TMP/run-$b-lat$rate-$r.txt" 2>&1 || true
	line=$(grep '^RESULT ' "$TMP/run-$b-lat$rate-$r.txt" || echo "RESULT mode=both msgs=0 complete=0")
	echo "$b lat$rate - $r ${line#RESULT }" >>"$TMP/results"
	log "$b lat$rate #$r: ${line#RESULT }"
}

run_lats() { # run_lats BROKER: the rates it can sustain
	local rate r cap
	for rate in $LAT_RATES; do
		if [ "$1" = rabbitmq ]; then
			cap=$(median msgs_per_s rabbitmq durable1k both)
			if [ "$cap" = na ] || awk -v c="$cap" -v r="$rate" 'BEGIN { exit !(r > 0.9 * c) }'; then
				log "rabbitmq lat$rate skipped: above 90 % of its durable end-to-end rate ($cap msgs/s)"
				continue
			fi
		fi
		for r in $(seq "$REPS"); do run_lat "$1" "$rate" "$r"; done
	done
}

run_matrix() { # run_matrix BROKER
	local p m r
	for p in $PROFILES; do for r in $(seq "$REPS"); do for m in $MODES; do
		run_one "$1" "$p" "$m" "$r"
	done; done; done
}

# median FIELD BROKER PROFILE MODE -> median of the numeric values, or "na"
median() {
	awk -v f="$1" -v b="$2" -v p="$3" -v m="$4" '
		$1 == b && $2 == p && $3 == m { for (i = 5; i <= NF; i++) { split($i, kv, "=");
			if (kv[1] == f && kv[2] != "na" && kv[2] != "") v[n++] = kv[2] + 0 } }
		END { if (!n) { print "na"; exit }
			for (i = 1; i < n; i++) for (j = i; j > 0 && v[j - 1] > v[j]; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
			print (n % 2) ? v[(n - 1) / 2] : (v[n / 2 - 1] + v[n / 2]) / 2 }' "$TMP/results"
}


machine_info() {
	echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "- nproc: $(nproc); CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
	echo "- kernel: $(uname -sr); memory: $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
	echo "- mqd: $("$MQD_BIN" --version 2>&1 | head -1) ($MQD_BIN); RabbitMQ: ${RMQ_VERSION:-not run} (AMQP 1.0 plugin, classic durable queues)"
	echo "- matrix: $REPS reps x count $COUNT, window $WINDOW, 1 connection x 1 link, cap $RUN_CAP s per run; mqd restarted $MQD_RESTARTS time(s) during the run"
}

write_table() {
	local p m md rm
	{
		echo "# mqd vs RabbitMQ — $STAMP"
		echo
		machine_info
		echo
		echo "Medians of $REPS runs. Ratio = mqd / RabbitMQ (throughput: higher is better for mqd; latency: lower is better)."
		echo "Latency: send = send→accepted, both = send→receive; recv has none."
		echo
		echo "| profile | mode | mqd msg/s | RabbitMQ msg/s | ratio | mqd MB/s | RabbitMQ MB/s | mqd p50 ms | RabbitMQ p50 ms | ratio | mqd p99 ms | RabbitMQ p99 ms | mqd CPU % | RabbitMQ CPU % |"
		echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
		for p in $PROFILES; do for m in $MODES; do
			local mq rq; mq=$(median msgs_per_s mqd "$p" "$m"); rq=$(median msgs_per_s rabbitmq "$p" "$m")
			local m50 r50; m50=$(median p50_ms mqd "$p" "$m"); r50=$(median p50_ms rabbitmq "$p" "$m")
			echo "| $p | $m | $(fmt "$mq" 0) | $(fmt "$rq" 0) | $(ratio "$mq" "$rq") |" \
				"$(fmt "$(median mb_per_s mqd "$p" "$m")" 2) | $(fmt "$(median mb_per_s rabbitmq "$p" "$m")" 2) |" \
				"$(fmt "$m50" 2) | $(fmt "$r50" 2) | $(ratio "$m50" "$r50") |" \
				"$(fmt "$(median p99_ms mqd "$p" "$m")" 2) | $(fmt "$(median p99_ms rabbitmq "$p" "$m")" 2) |" \
				"$(fmt "$(median broker_cpu_pct mqd "$p" "$m")" 0) | $(fmt "$(median broker_cpu_pct rabbitmq "$p" "$m")" 0) |"
			printf '%s-%s %s %s\n' "$p" "$m" "$mq" "$rq" >>"$TMP/chart.dat"
		done; done
		if [ -n "$LAT_RATES" ]; then
			echo
			echo "Durable 1 KiB end-to-end at a fixed rate (\`mqd-bench both --rate R\`, $LAT_SECS s of messages, medians of $REPS;"
			echo "floor: \`fsync-modes -r R\` append mode in mqd's data directory, run before each mqd run: one"
			echo "pwrite + fdatasync per group of due messages, no broker; RabbitMQ only below 90 % of its durable end-to-end rate):"
			echo
			echo "| rate msgs/s | floor p50 ms | floor p99 ms | mqd p50 ms | mqd p99 ms | mqd p99.9 ms | mqd msgs/s | RabbitMQ p50 ms | RabbitMQ p99 ms | RabbitMQ msgs/s |"
			echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
			local rate
			for rate in $LAT_RATES; do
				echo "| $rate | $(fmt "$(median p50_ms floor "lat$rate" -)" 2) | $(fmt "$(median p99_ms floor "lat$rate" -)" 2) |" \
					"$(fmt "$(median p50_ms mqd "lat$rate" -)" 2) | $(fmt "$(median p99_ms mqd "lat$rate" -)" 2) |" \
					"$(fmt "$(median p999_ms mqd "lat$rate" -)" 2) | $(fmt "$(median msgs_per_s mqd "lat$rate" -)" 0) |" \
					"$(fmt "$(median p50_ms rabbitmq "lat$rate" -)" 2) | $(fmt "$(median p99_ms rabbitmq "lat$rate" -)" 2) |" \
					"$(fmt "$(median msgs_per_s rabbitmq "lat$rate" -)" 0) |"
			done
		fi
		echo
		echo "Incomplete runs (complete=0: capped, idle or error): $(grep -c 'complete=0' "$TMP/results" || true)"
		echo
		echo "![msgs/s]($(basename "$OUT_PNG"))"
		echo
		echo "<details><summary>raw RESULT lines (broker profile mode rep fields)</summary>"
		echo
		echo '```'
		cat "$TMP/results"
		echo '```'
		echo "</details>"
	} >"$OUT_MD"
}

write_chart() {
	command -v gnuplot >/dev/null || { log "no gnuplot: chart skipped"; return 0; }
	sed -i 's/ na/ 0/g' "$TMP/chart.dat"
	gnuplot <<EOF || log "gnuplot failed"
set terminal pngcairo size 1000,520 font "sans,10"
set output "$OUT_PNG"
set title "mqd vs RabbitMQ (AMQP 1.0), msgs/s, median of $REPS runs"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set logscale y
set yrange [100:*]
set grid ytics
set xtics rotate by -20
set key top left
plot "$TMP/chart.dat" using 2:xtic(1) title "mqd", '' using 3 title "RabbitMQ"
EOF
}

main() {
	mkdir -p "$OUTDIR"
	: >"$TMP/results"
	install_deps
	find_bench
	if [ "$ONLY" != rabbitmq ]; then
		[ -x "$MQD_BIN" ] || { log "no mqd binary at $MQD_BIN (set MQD_BIN)"; exit 1; }
		start_mqd
		run_matrix mqd
		[ -n "$LAT_RATES" ] && find_fsync_modes && run_lats mqd
		stop_pid "$MQD_PID" 10; MQD_PID=
	fi
	if [ "$ONLY" != mqd ]; then
		start_rabbitmq
		run_matrix rabbitmq
		[ -n "$LAT_RATES" ] && run_lats rabbitmq
		stop_rabbitmq
	fi
	write_table
	write_chart
	log "wrote $OUT_MD$( [ -f "$OUT_PNG" ] && echo " and $OUT_PNG") in $(($(date +%s) - START)) s"
	cat "$OUT_MD"
}

main "$@"
