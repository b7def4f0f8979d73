# bench/lib.sh: helpers shared by the benchmark scripts (sourced, not run).

stop_pid() { # stop_pid PID GRACE_SECONDS: TERM, then KILL after the grace period
	local pid=$1 grace=$2 i
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < grace * 10; i++)); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
	kill -KILL "$pid" 2>/dev/null || true
}

wait_port() { # wait_port PORT SECONDS: listening socket present (no connection is made)
	local i
	for ((i = 0; i < $2 * 10; i++)); do
		[ "$(ss -Hltn "sport = :$1" | wc -l)" -gt 0 ] && return 0
		sleep 0.1
	done
	return 1
}

# median_of FILE FIELD KEY...: lines of FILE are "KEY... k=v k=v ..."; prints the median
# of FIELD over the lines whose first words equal KEY..., or "na".
median_of() {
	local file=$1 f=$2
	shift 2
	awk -v f="$f" -v key="$*" '
		{ n_key = split(key, kw, " "); ok = 1
		  for (i = 1; i <= n_key; i++) if ($i != kw[i]) ok = 0
		  if (!ok) next
		  for (i = n_key + 1; i <= NF; i++) { split($i, kv, "=")
			if (kv[1] == f && kv[2] != "na" && kv[2] != "") v[n++] = kv[2] + 0 } }
		END { if (!n) { print "na"; exit }
			for (i = 1; i < n; i++) for (j = i; j > 0 && v[j - 1] > v[j]; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
			print (n % 2) ? v[(n - 1) / 2] : (v[n / 2 - 1] + v[n / 2]) / 2 }' "$file"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "na" || b == "na" || b + 0 == 0) print "–"; else printf "%.2f\n", a / b }'; }
fmt() { awk -v a="$1" -v d="$2" 'BEGIN { if (a == "na") print "–"; else printf "%.*f\n", d, a }'; }

machine_line() { # the machine a result was measured on, for the report
	echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "- nproc: $(nproc); CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
	echo "- kernel: $(uname -sr); memory: $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
}
