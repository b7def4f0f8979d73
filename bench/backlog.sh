#!/bin/bash
# bench/backlog.sh: issue 8's backlog figures with mqd-bench —
#   "throughput and latency as the backlog grows to 10 GB (reads from disk)" and
#   "a 10 GB backlog read at >= 80 % of the in-cache rate".
#
# 1. Starts its own mqd (127.0.0.1 only, fresh data dir) and fills ONE topic (1 partition,
#    default flush = sync, durable 1 KiB) to GB gigabytes of payload in STEP_GB steps,
#    printing send msgs/s, MB/s, p50/p99 per step (window WINDOW: latency there is Little's
#    law), plus a paced latency probe per step (PROBE_COUNT msgs at PROBE_RATE msgs/s).
# 2. Reads the whole backlog from offset "first" with a fresh consumer group per pass
#    (T/ConsumerGroups/G, rabbitmq:stream-offset-spec=first), in READ_STEP_GB chunks (the
#    group keeps its position between chunks): alternately with the segment files in the
#    page cache ("warm") and after evicting them with posix_fadvise(DONTNEED) ("cold"),
#    verified with mincore (fincore). Pattern: warm, cold, warm, cold, ... warm (REPS cold
#    passes). Per pass: msgs/s, MB/s, broker CPU, broker read IO (/proc/PID/io), pread
#    sizes. Ratio = median cold / median warm.
# 3. A raw sequential read of the evicted segment files with dd (the disk's ceiling).
# Prints a summary and writes it to bench/results/backlog-YYYYMMDD-HHMMSS.md.
#
# Shared machine: every measured phase (each fill step, each read chunk, the dd) runs
# under `flock $LOCK` (the lock other benchmarks use), each hold bounded by RUN_CAP s.
# Every loop is bounded in count; a phase starting after DEADLINE s is skipped.
# Stops only the mqd it started (by PID) and deletes its data dir on exit.
#
# Environment (defaults in brackets):
#   MQD [build/mqd]  BENCH [mqd-bench next to MQD, else build/mqd-bench]
#   GB [10]  STEP_GB [1]  READ_STEP_GB [2]  SIZE [1024]  WINDOW [1000]  REPS [2]
#   PROBE_COUNT [20000] (0: no probe)  PROBE_RATE [10000]
#   PORT [47341]  DATA_PARENT [/tmp]  LOCK [/tmp/mqd-bench.lock]  LOCK_WAIT [900] (s)
#   RUN_CAP [170] (s per mqd-bench run)  DEADLINE [5400] (s)  KEEP_DATA=1  NO_REPORT=1
set -euo pipefail

cd "$(dirname "$0")/.."
SRC_ROOT=$PWD
MQD=${MQD:-build/mqd}
if [ -z "${BENCH:-}" ]; then
	BENCH="$(dirname "$MQD")/mqd-bench"
	[ -x "$BENCH" ] || BENCH=build/mqd-bench
fi
GB=${GB:-10}
STEP_GB=${STEP_GB:-1}
READ_STEP_GB=${READ_STEP_GB:-2}
SIZE=${SIZE:-1024}
WINDOW=${WINDOW:-1000}
REPS=${REPS:-2}
PROBE_COUNT=${PROBE_COUNT:-20000}
PROBE_RATE=${PROBE_RATE:-10000}
PORT=${PORT:-47341}
DATA_PARENT=${DATA_PARENT:-/tmp}
LOCK=${LOCK:-/tmp/mqd-bench.lock}
LOCK_WAIT=${LOCK_WAIT:-900}
RUN_CAP=${RUN_CAP:-170}
DEADLINE=${DEADLINE:-5400}
PY=/usr/bin/python3
TOPIC=backlog
URL=amqp://127.0.0.1:$PORT
START=$(date +%s)
STAMP=$(date +%Y%m%d-%H%M%S)
OUT_MD=$SRC_ROOT/bench/results/backlog-$STAMP.md

log() { echo "backlog: $*" >&2; }
die() { log "$*"; exit 1; }

for b in "$MQD" "$BENCH"; do [ -x "$b" ] || die "not executable: $b (set MQD / BENCH)"; done
for c in flock fincore dd awk ss; do command -v $c >/dev/null || die "needs $c"; done
[ -x $PY ] || die "needs $PY"

# ---- disk space: refuse below 2 x GB free ----
NEED=$(awk -v g="$GB" 'BEGIN{printf "%.0f", 2 * g * 1e9}')
AVAIL=$(df --output=avail -B1 "$DATA_PARENT" | tail -1 | tr -d ' ')
[ "$AVAIL" -ge "$NEED" ] || die "only $AVAIL bytes free under $DATA_PARENT, need 2 x GB = $NEED"

DATA=$(mktemp -d "$DATA_PARENT/mqd-backlog.XXXXXX")
MQD_PID=
cleanup() {
	if [ -n "$MQD_PID" ] && kill -0 "$MQD_PID" 2>/dev/null; then
		kill -TERM "$MQD_PID" 2>/dev/null || true
		for _ in $(seq 100); do kill -0 "$MQD_PID" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$MQD_PID" 2>/dev/null || true
	fi
	if [ -n "${KEEP_DATA:-}" ]; then log "kept $DATA"; else rm -rf "$DATA"; fi
}
trap 'cleanup; rm -f "$DATA.mqd.log" "$DATA.report"' EXIT
trap 'exit 130' INT TERM

CMDS=()   # every command that measured something, for the report
ROWS_FILL=() ROWS_READ=() RAW=()

kv() { # kv KEY "RESULT line" -> value (or na)
	local v
	v=$(tr ' ' '\n' <<<"$2" | sed -n "s/^$1=//p" | head -1)
	echo "${v:-na}"
}
late() { [ $(($(date +%s) - START)) -ge "$DEADLINE" ]; }
locked() { flock -w "$LOCK_WAIT" "$LOCK" "$@"; }

# Runs mqd-bench under the lock; sets RES to its RESULT line (or "RESULT complete=0 exit=N").
RES=
bench() {
	local out rc=0
	CMDS+=("flock -w $LOCK_WAIT $LOCK $BENCH $*")
	out=$(locked timeout $((RUN_CAP + 30)) "$BENCH" "$@" --url "$URL" --broker-pid "$MQD_PID" \
		--duration-cap "$RUN_CAP" --quiet 2>&1) || rc=$?
	RES=$(grep '^RESULT ' <<<"$out" | tail -1 || true)
	if [ -z "$RES" ]; then
		log "mqd-bench $1 gave no RESULT (exit $rc): $(tail -2 <<<"$out" | tr '\n' ' ')"
		RES="RESULT complete=0 exit=$rc"
	fi
}

segfiles() { find "$DATA" -type f -path "*/topics/*" | sort; }
logfiles() { find "$DATA" -type f -path "*/topics/*" -name '*.log' | sort; }
log_bytes() { logfiles | xargs -r stat -c %s | awk '{s += $1} END {printf "%.0f\n", s}'; }

# Fraction (%) of the segment .log files' pages in the page cache (mincore, via fincore).
resident_pct() {
	logfiles | xargs -r fincore -b -n -o RES,SIZE |
		awk '{r += $1; s += $2} END {printf "%.1f", s ? 100 * r / s : 0}'
}

evict() { # fsync + posix_fadvise(DONTNEED) every file under the data dir
	$PY - "$DATA" <<'EOF'
import os, sys
for root, _, files in os.walk(sys.argv[1]):
    for f in files:
        p = os.path.join(root, f)
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.fsync(fd)  # dirty pages cannot be dropped
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
EOF
}

warm_up() { # bring the .log files into the page cache if they are not (bounded: 2 tries)
	local i
	for i in 1 2; do
		[ "$(awk -v p="$(resident_pct)" 'BEGIN{print (p >= 99)}')" = 1 ] && return 0
		logfiles | xargs -r cat >/dev/null
	done
}

io_field() { awk -v k="$1:" '$1 == k {print $2}' "/proc/$MQD_PID/io"; }

start_mqd() {
	CMDS+=("$MQD --foreground --listen 127.0.0.1:$PORT --data-dir $DATA")
	setsid "$MQD" --foreground --listen "127.0.0.1:$PORT" --data-dir "$DATA" \
		>>"$DATA.mqd.log" 2>&1 </dev/null &
	MQD_PID=$!
	for _ in $(seq 200); do
		[ "$(ss -Hltn "sport = :$PORT" | wc -l)" -gt 0 ] && return 0
		kill -0 "$MQD_PID" 2>/dev/null || break
		sleep 0.1
	done
	tail -5 "$DATA.mqd.log" >&2 || true
	die "mqd did not start on port $PORT"
}

# ---- machine ----
MACHINE="nproc $(nproc), RAM $(awk '/MemTotal/{printf "%.1f GiB", $2/1048576}' /proc/meminfo), \
kernel $(uname -r), disk $(df -h --output=source,size,avail "$DATA_PARENT" | tail -1 | awk '{print $1" size "$2" free "$3}'), \
read_ahead_kb $(cat /sys/block/"$(basename "$(df --output=source "$DATA_PARENT" | tail -1)")"/queue/read_ahead_kb 2>/dev/null || echo ?)"
log "$MACHINE"
log "data dir $DATA, GB=$GB STEP_GB=$STEP_GB READ_STEP_GB=$READ_STEP_GB SIZE=$SIZE REPS=$REPS"
start_mqd
log "mqd pid $MQD_PID on $URL"

# ---- 1. fill in steps ----
TOTAL_MSGS=0
NSTEPS=$(awk -v g="$GB" -v s="$STEP_GB" 'BEGIN{n = int(g / s); if (n * s < g - 1e-9) n++; print n}')
[ "$NSTEPS" -le 1000 ] || die "too many steps ($NSTEPS)"
for ((i = 1; i <= NSTEPS; i++)); do
	late && { log "deadline: fill stopped at step $i"; break; }
	goal=$(awk -v g="$GB" -v s="$STEP_GB" -v i="$i" -v z="$SIZE" \
		'BEGIN{t = i * s; if (t > g) t = g; printf "%.0f", t * 1e9 / z}')
	n=$((goal - TOTAL_MSGS))
	[ "$n" -gt 0 ] || continue
	bench send --address "$TOPIC" --count "$n" --size "$SIZE" --window "$WINDOW" --durable
	r=$RES
	m=$(kv msgs "$r"); [ "$m" = na ] && m=0
	TOTAL_MSGS=$((TOTAL_MSGS + m))
	probe="na na na"
	if [ "$PROBE_COUNT" -gt 0 ]; then
		bench send --address "$TOPIC" --count "$PROBE_COUNT" --size "$SIZE" --window "$WINDOW" \
			--durable --rate "$PROBE_RATE"
		p=$RES
		pm=$(kv msgs "$p"); [ "$pm" = na ] && pm=0
		TOTAL_MSGS=$((TOTAL_MSGS + pm))
		probe="$(kv msgs_per_s "$p") $(kv p50_ms "$p") $(kv p99_ms "$p")"
	fi
	gb=$(awk -v m="$TOTAL_MSGS" -v z="$SIZE" 'BEGIN{printf "%.2f", m * z / 1e9}')
	row="$i $gb $(log_bytes) $(kv msgs "$r") $(kv msgs_per_s "$r") $(kv mb_per_s "$r") $(kv p50_ms "$r") \
$(kv p99_ms "$r") $(kv broker_cpu_pct "$r") $(kv client_cpu_pct "$r") $probe $(cut -d' ' -f1 /proc/loadavg) $(kv complete "$r")"
	ROWS_FILL+=("$row")
	log "fill step $i: backlog ${gb} GB: $(kv msgs_per_s "$r") msgs/s $(kv mb_per_s "$r") MB/s p50 $(kv p50_ms "$r") p99 $(kv p99_ms "$r") ms; probe@$PROBE_RATE/s p50/p99 $(cut -d' ' -f2,3 <<<"$probe") ms"
	kill -0 "$MQD_PID" 2>/dev/null || die "mqd died during fill (see $DATA.mqd.log)"
done
LOG_BYTES=$(log_bytes)
RES_AFTER_FILL=$(resident_pct)
log "backlog: $TOTAL_MSGS msgs, $LOG_BYTES bytes of .log files, ${RES_AFTER_FILL}% in the page cache"
[ "$TOTAL_MSGS" -gt 0 ] || die "nothing was written"

# ---- 2. read passes ----
CHUNK=$(awk -v g="$READ_STEP_GB" -v z="$SIZE" 'BEGIN{printf "%.0f", g * 1e9 / z}')
NCHUNK=$(((TOTAL_MSGS + CHUNK - 1) / CHUNK))
[ "$NCHUNK" -le 1000 ] || die "too many read chunks ($NCHUNK)"

read_pass() { # read_pass KIND(warm|cold) N
	local kind=$1 k=$2 g="r$2-$1" res0 res1 j left want spec r
	if [ "$kind" = cold ]; then evict; else warm_up; fi
	res0=$(resident_pct)
	local msgs=0 secs=0 bcpu=0 ccpu_sum=0 inc=1 rb0 rc0 sc0 t0 t1
	rb0=$(io_field read_bytes); rc0=$(io_field rchar); sc0=$(io_field syscr)
	local ut0 st0
	read -r ut0 st0 < <(awk '{print $14, $15}' "/proc/$MQD_PID/stat")
	left=$TOTAL_MSGS
	for ((j = 0; j < NCHUNK && left > 0; j++)); do
		late && { log "deadline: pass $g stopped at chunk $j"; inc=0; break; }
		want=$((left < CHUNK ? left : CHUNK))
		spec=(); [ "$j" = 0 ] && spec=(--offset-spec first)
		bench recv --source "$TOPIC/ConsumerGroups/$g" "${spec[@]}" --count "$want" \
			--window "$WINDOW" --idle 20
		r=$RES
		local m s
		m=$(kv msgs "$r"); s=$(kv secs "$r")
		[ "$m" = na ] && { inc=0; break; }
		[ "$(kv complete "$r")" = 1 ] || inc=0
		msgs=$((msgs + m)); left=$((left - m))
		secs=$(awk -v a="$secs" -v b="$s" 'BEGIN{print a + b}')
		bcpu=$(awk -v a="$bcpu" -v b="$(kv broker_cpu_s "$r")" 'BEGIN{print a + (b == "na" ? 0 : b)}')
		ccpu_sum=$(awk -v a="$ccpu_sum" -v b="$(kv client_cpu_pct "$r")" -v s="$s" \
			'BEGIN{print a + (b == "na" ? 0 : b * s)}')
		log "  $g chunk $j: $m msgs, $(kv msgs_per_s "$r") msgs/s, broker $(kv broker_cpu_pct "$r")% client $(kv client_cpu_pct "$r")%"
		[ "$m" -gt 0 ] || { inc=0; break; }
	done
	local rb rc sc
	rb=$(($(io_field read_bytes) - rb0)); rc=$(($(io_field rchar) - rc0)); sc=$(($(io_field syscr) - sc0))
	local ut st hz
	hz=$(getconf CLK_TCK)
	read -r ut st < <(awk -v u="$ut0" -v s="$st0" -v hz="$hz" '{printf "%.2f %.2f\n", ($14 - u) / hz, ($15 - s) / hz}' "/proc/$MQD_PID/stat")
	res1=$(resident_pct)
	# kind pass msgs secs msgs/s MB/s broker% client% resident-before resident-after
	# disk-read-MB rchar-MB read-syscalls KB/read rchar-per-payload-byte complete load
	# broker-user-s broker-sys-s (whole pass, incl. the gaps between chunks)
	ROWS_READ+=("$(awk -v k="$kind" -v n="$k" -v m="$msgs" -v s="$secs" -v z="$SIZE" -v bc="$bcpu" \
		-v cc="$ccpu_sum" -v r0="$res0" -v r1="$res1" -v rb="$rb" -v rc="$rc" -v sc="$sc" -v inc="$inc" \
		-v ld="$(cut -d' ' -f1 /proc/loadavg)" -v ut="$ut" -v st="$st" 'BEGIN{
		printf "%s %d %d %.2f %.0f %.1f %.0f %.0f %s %s %.0f %.0f %d %.0f %.2f %d %s %s %s",
		k, n, m, s, (s > 0 ? m / s : 0), (s > 0 ? m * z / s / 1e6 : 0), (s > 0 ? 100 * bc / s : 0),
		(s > 0 ? cc / s : 0), r0, r1, rb / 1e6, rc / 1e6, sc, (sc ? rc / sc / 1024 : 0),
		(m ? rc / (m * z) : 0), inc, ld, ut, st}')")
	log "pass $g: ${ROWS_READ[-1]}"
	kill -0 "$MQD_PID" 2>/dev/null || die "mqd died during $g"
}

[ "$REPS" -ge 1 ] && [ "$REPS" -le 20 ] || die "REPS must be 1..20"
read_pass warm 1
for ((k = 1; k <= REPS; k++)); do
	late && { log "deadline: no more read passes"; break; }
	read_pass cold "$k"
	late && break
	read_pass warm $((k + 1))
done

# ---- 3. raw sequential read of the evicted files (the disk's ceiling) ----
if ! late; then
	evict
	r0=$(resident_pct)
	CMDS+=("flock $LOCK sh -c 'for f in \$(.log files); do dd if=\$f of=/dev/null bs=1M; done'")
	t=$(locked timeout "$RUN_CAP" bash -c 'st=$(date +%s.%N); for f in "$@"; do dd if="$f" of=/dev/null bs=1M status=none; done; echo "$st $(date +%s.%N)"' _ $(logfiles) || echo "")
	if [ -n "$t" ]; then
		RAW=("$(awk -v a="${t% *}" -v b="${t#* }" -v B="$LOG_BYTES" -v r="$r0" \
			'BEGIN{printf "%.0f MB in %.2f s = %.0f MB/s (resident before: %s%%)", B / 1e6, b - a, B / 1e6 / (b - a), r}')")
		log "raw dd read: ${RAW[0]}"
	fi
fi

# ---- summary ----
med() { sort -g | awk '{v[NR] = $1} END {if (!NR) print "na"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
WARM=$(for r in "${ROWS_READ[@]}"; do set -- $r; if [ "$1" = warm ] && [ "${16}" = 1 ]; then echo "$5"; fi; done | med)
COLD=$(for r in "${ROWS_READ[@]}"; do set -- $r; if [ "$1" = cold ] && [ "${16}" = 1 ]; then echo "$5"; fi; done | med)
RATIO=$(awk -v c="$COLD" -v w="$WARM" 'BEGIN{if (c == "na" || w == "na" || w == 0) print "na"; else printf "%.2f", c / w}')
VERDICT=$(awk -v r="$RATIO" 'BEGIN{if (r == "na") print "not measured"; else if (r >= 0.8) print "met (>= 0.80)"; else print "MISSED (< 0.80)"}')

{
	echo "# Backlog read from disk vs page cache (bench/backlog.sh)"
	echo
	echo "Run $STAMP, $(($(date +%s) - START)) s. Machine: $MACHINE."
	echo "mqd: \`$MQD\`, mqd-bench: \`$BENCH\`. One topic \`$TOPIC\`, 1 partition, flush = sync (default),"
	echo "$SIZE B durable messages, window $WINDOW, one connection and link. GB = 10^9 B of payload."
	echo
	echo "## Fill: throughput and latency as the backlog grows"
	echo
	echo "Saturated send (window $WINDOW: latency ≈ window / rate) and a paced probe ($PROBE_COUNT msgs at $PROBE_RATE msgs/s) after each step."
	echo
	echo "| step | backlog GB | .log bytes | msgs | send msgs/s | MB/s | p50 ms | p99 ms | broker CPU % | client CPU % | probe msgs/s | probe p50 ms | probe p99 ms | load1 | complete |"
	echo "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
	for r in "${ROWS_FILL[@]}"; do echo "| ${r// / | } |"; done
	echo
	echo "## Reads of the whole backlog ($TOTAL_MSGS msgs, $LOG_BYTES bytes of .log) from offset first"
	echo
	echo "Each pass: a new consumer group (\`$TOPIC/ConsumerGroups/rN-KIND\`, offset-spec first), read in chunks of"
	echo "$CHUNK msgs (the group keeps its position between chunks; msgs/s = msgs / sum of chunk times)."
	echo "warm: .log files in the page cache (resident % by mincore/fincore); cold: evicted first with"
	echo "fsync + posix_fadvise(POSIX_FADV_DONTNEED) on every file of the data dir. IO columns from"
	echo "/proc/MQD_PID/io over the pass: disk read (read_bytes), rchar (bytes returned by read/pread),"
	echo "read syscalls (syscr), KB per read syscall, rchar per payload byte (read amplification);
broker user/sys CPU seconds from /proc/MQD_PID/stat over the whole pass (chunk gaps included)."
	echo
	echo "| kind | pass | msgs | secs | msgs/s | MB/s | broker CPU % | client CPU % | resident before % | resident after % | disk read MB | rchar MB | read syscalls | KB/read | rchar/payload | complete | load1 | broker user s | broker sys s |"
	echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|"
	for r in "${ROWS_READ[@]}"; do echo "| ${r// / | } |"; done
	echo
	[ "${#RAW[@]}" -gt 0 ] && { echo "Raw sequential read of the evicted .log files with dd bs=1M: ${RAW[0]}."; echo; }
	echo "## Summary"
	echo
	echo "- backlog: $(awk -v m="$TOTAL_MSGS" -v z="$SIZE" 'BEGIN{printf "%.2f", m * z / 1e9}') GB payload, $TOTAL_MSGS msgs, $LOG_BYTES bytes on disk (.log), ${RES_AFTER_FILL}% cached after the fill"
	echo "- in-cache read (median of warm passes): $WARM msgs/s = $(awk -v v="$WARM" -v z="$SIZE" 'BEGIN{if (v == "na") print "na"; else printf "%.1f", v * z / 1e6}') MB/s"
	echo "- cold read (median of cold passes):     $COLD msgs/s = $(awk -v v="$COLD" -v z="$SIZE" 'BEGIN{if (v == "na") print "na"; else printf "%.1f", v * z / 1e6}') MB/s"
	echo "- ratio cold / in-cache: $RATIO — target >= 0.80: $VERDICT"
	echo
	echo "## Commands"
	echo
	echo '```'
	echo "GB=$GB STEP_GB=$STEP_GB READ_STEP_GB=$READ_STEP_GB SIZE=$SIZE WINDOW=$WINDOW REPS=$REPS MQD=$MQD BENCH=$BENCH bench/backlog.sh"
	printf '%s\n' "${CMDS[@]}" | awk '!seen[$0]++' | sed -e "s#--count [0-9]*#--count N#" | awk '!seen[$0]++'
	echo "(each mqd-bench also got: --url $URL --broker-pid MQD_PID --duration-cap $RUN_CAP --quiet)"
	echo '```'
} >"$DATA.report"
echo
cat "$DATA.report"
if [ -z "${NO_REPORT:-}" ]; then
	mkdir -p "$(dirname "$OUT_MD")"
	cp "$DATA.report" "$OUT_MD"
	log "wrote $OUT_MD"
fi
rm -f "$DATA.report"
