"""bench/benchlib.py: what the Python cluster benchmarks share (bench/repl-acks.py,
bench/fwd-hop.py): one mqd-bench run and its RESULT line, a process's CPU seconds from
/proc, the machine's busy/idle jiffies, and the page-cache warm-up."""

import argparse
import os
import re
import subprocess
import time


def run_bench(mode, url, address, count, window, pid, extra=()):
    """Runs build/mqd-bench MODE (durable 1 KiB, --quiet, --broker-pid PID) and returns
    (RESULT line as a dict of strings, the whole output). Exits the script on failure."""
    b = os.path.join(os.environ["MQD_BUILDDIR"], "mqd-bench")
    argv = [b, mode, "--url", url, "--address", address, "--count", str(count), "--size", "1024",
            "--durable", "--window", str(window), "--duration-cap", "120", "--quiet",
            "--broker-pid", str(pid)] + list(extra)
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=180)
    out = r.stdout.decode() + r.stderr.decode()
    if r.returncode != 0:
        raise SystemExit("mqd-bench failed: %s\n%s" % (" ".join(argv), out))
    m = re.search(r"^RESULT .*$", out, re.M)
    if not m:
        raise SystemExit("no RESULT line from mqd-bench:\n" + out)
    return dict(f.split("=", 1) for f in m.group(0).split()[1:] if "=" in f), out


def num(kv, k):
    """The number of RESULT key k, None when absent or `na`."""
    return float(kv[k]) if re.match(r"^[0-9.]+$", kv.get(k, "")) else None


def client_cpu_s(kv):
    """mqd-bench's own CPU seconds over the measured interval."""
    return (num(kv, "client_cpu_pct") or 0) / 100 * (num(kv, "secs") or 0)


def machine():
    """(busy, idle, steal) jiffies of the whole machine (/proc/stat's cpu line)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (v + [0] * 8)[:8]
    return user + nice + system + irq + softirq, idle + iowait, steal


def cpu_s(pid):
    """utime + stime of a process, in seconds (/proc/PID/stat fields 14 and 15)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def warm(dirpath, gib):
    """Writes gib GiB of zeros into dirpath and deletes it: touches the page cache's memory."""
    path = os.path.join(dirpath, "warm.tmp")
    chunk = b"\0" * (1 << 20)
    t0 = time.monotonic()
    try:
        with open(path, "wb") as f:
            for _ in range(int(gib * 1024)):
                f.write(chunk)
    finally:
        if os.path.exists(path):
            os.unlink(path)
    print("warmed the page cache: %.1f GiB in %.1f s" % (gib, time.monotonic() - t0), flush=True)


def arg_parser():
    """The options every cluster benchmark takes: --count, --reps, --window, --out, --warm."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=200000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--window", type=int, default=1000)
    ap.add_argument("--out", default=None)
    ap.add_argument("--warm", type=float, default=0, help="GiB to write and delete first (0: none)")
    return ap
