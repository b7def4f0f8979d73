#!/usr/bin/python3
"""bench/repl-acks.py: durable 1 KiB sends at acks = leader / quorum / all on an RF-3
partition (a real etcd and three mqd nodes on this machine, loopback only), each as a ratio
to a single-node mqd measured in the same run (issue 19's throughput line: target
`all` >= 0.5x single node).

  bench/repl-acks.py [--count N] [--reps R] [--window W] [--warm GB] [--out FILE]

--warm GB first writes and deletes GB GiB of zeros in the data directories' file system:
this VM's page cache costs about 4x more per KiB until its memory has been touched once,
and three nodes write three times the bytes of one, so a cold first run measures the VM,
not the brokers (bench/results/repl-acks-*.md).

Each rep runs, in turn: single node, leader, quorum, all (alternated, so that the
machine's drift hits every profile alike); a profile's figure is the median of its reps.
Every process it starts (etcd, four brokers) is stopped by PID at the end (the test
harness's Test.cleanup). Needs build/mqd, build/mqd-bench, build/mqctl and etcd on PATH.
"""

import os
import re
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "interop"))
os.environ.setdefault("MQD_BUILDDIR", os.path.join(ROOT, "build"))
import mqdtest  # noqa: E402
from mqdcluster import Etcd, get_json, start_nodes, wait_for  # noqa: E402
from benchlib import arg_parser, client_cpu_s, cpu_s, machine, num, run_bench, warm  # noqa: E402

RACKS = {1: "a", 2: "b", 3: "c"}
PROFILES = ("single", "leader", "quorum", "all")


def bench(url, address, count, window, pid):
    kv, out = run_bench("send", url, address, count, window, pid)
    return num(kv, "msgs_per_s"), (num(kv, "p50_ms"), num(kv, "p99_ms")), out, client_cpu_s(kv)


def cpu_threads(pid):
    """{thread name: utime + stime seconds} of a process's threads (flushers summed)."""
    out = {}
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                txt = f.read()
            name = re.sub(r"[0-9]+$", "", txt[txt.index("(") + 1:txt.rindex(")")])
            fields = txt.rsplit(")", 1)[1].split()
            out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        pass
    return out


def create(broker, topic, acks=None):
    cfg = ["--config", "replication_factor=3", "--config", "acks=%s" % acks] if acks else []
    rc, out, err = mqdtest.mqctl(broker.url, "topic", "create", topic, "--partitions", "1", *cfg)
    if rc != 0:
        raise SystemExit("topic create %s: %s" % (topic, out + err))


def main():
    ap = arg_parser()
    ap.add_argument("--cluster-flush", default=None,
                    help="flush policy of the three cluster nodes (default: the config default, sync)")
    ap.add_argument("--profiles", default=",".join(PROFILES), help="comma-separated subset of %s" % (PROFILES,))
    a = ap.parse_args()
    t = mqdtest.Test("repl-acks-bench")
    if a.warm > 0:
        warm(t.tmpdir, a.warm)
    res = {p: [] for p in PROFILES}
    cpu = {p: [] for p in PROFILES}
    allcpu = {p: [] for p in PROFILES}
    try:
        etcd = Etcd(t)
        etcd.start()
        single = t.broker("single")
        sets = (lambda i: {"flush": a.cluster_flush}) if a.cluster_flush else (lambda i: {})
        nodes = start_nodes(t, etcd, RACKS, sets)
        leader_of = {}
        for acks in ("leader", "quorum", "all"):
            create(nodes[1], "b_" + acks, acks)
            key = "/mqd/partitions/b_%s/0" % acks
            st = wait_for(key, lambda: get_json(etcd.port, key), 10)
            leader_of[acks] = nodes[st["leader"]]
            wait_for("isr of 3 for " + acks,
                     lambda: len((get_json(etcd.port, key) or {}).get("isr", [])) == 3, 20)
        profiles = [p for p in PROFILES if p in a.profiles.split(",")]
        for rep in range(a.reps):
            for p in profiles:
                topic = "s_%d" % rep if p == "single" else "b_" + p
                b = single if p == "single" else leader_of[p]
                if p == "single":
                    create(single, topic)
                others = [n for n in nodes.values() if n is not b] if p != "single" else []
                t0 = [cpu_threads(n.proc.pid) for n in [b] + others]
                c0 = [cpu_s(b.proc.pid)] + [cpu_s(n.proc.pid) for n in others]
                # everything this bench runs: the four brokers, etcd, and (below) the client
                everyone = [single.proc.pid, etcd.proc.pid] + [n.proc.pid for n in nodes.values()]
                e0, m0 = sum(cpu_s(x) for x in everyone), machine()
                v, (p50, p99), _, client_s = bench(b.url, topic, a.count, a.window, b.proc.pid)
                e1, m1 = sum(cpu_s(x) for x in everyone), machine()
                c1 = [cpu_s(b.proc.pid)] + [cpu_s(n.proc.pid) for n in others]
                us = [(y - x) * 1e6 / a.count for x, y in zip(c0, c1)]
                busy, idle, steal = (y - x for x, y in zip(m0, m1))
                allcpu[p].append(((e1 - e0 + client_s) * 1e6 / a.count, busy / max(1, busy + idle),
                                  steal / max(1, busy + idle + steal)))
                t1 = [cpu_threads(n.proc.pid) for n in [b] + others]
                if os.environ.get("THREADS"):
                    for i, (x, y) in enumerate(zip(t0, t1)):
                        print("  %s %s" % ("serving" if i == 0 else "replica", " ".join(
                            "%s=%.1fus" % (k, (y[k] - x.get(k, 0)) * 1e6 / a.count) for k in sorted(y)
                            if y[k] - x.get(k, 0) > 0)), flush=True)
                cpu[p].append((us[0], sum(us[1:])))
                res[p].append((v, p50, p99))
                print("rep %d %-7s %9.0f msg/s p50 %s ms p99 %s ms (%s)" % (rep, p, v, p50, p99, _.strip().splitlines()[-1] if os.environ.get("VERBOSE") else ""), flush=True)
    finally:
        t.cleanup()
    if not res["single"]:
        return
    base = statistics.median(x[0] for x in res["single"])
    # each rep's figure against the single node of the same rep: the machine's drift
    # between reps (the single node alone swung 184,000-337,000 msg/s in one run) then
    # cancels out of the ratio
    per_rep = {p: statistics.median(x[0] / y[0] for x, y in zip(res[p], res["single"]))
               for p in PROFILES if res[p]}
    lines = ["| profile | msg/s (median) | MB/s | ratio to single node | median of per-rep ratios | p50 ms | p99 ms | runs |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for p in [p for p in PROFILES if res[p]]:
        v = statistics.median(x[0] for x in res[p])
        p50 = statistics.median(x[1] for x in res[p] if x[1] is not None) if any(x[1] for x in res[p]) else float("nan")
        p99 = statistics.median(x[2] for x in res[p] if x[2] is not None) if any(x[2] for x in res[p]) else float("nan")
        lines.append("| %s | %.0f | %.1f | %.2f | %.2f | %.2f | %.2f | %s |" % (
            "single node" if p == "single" else "RF 3, acks = " + p, v, v * 1024 / 1e6, v / base,
            per_rep[p], p50, p99, ", ".join("%.0f" % x[0] for x in res[p])))
    lines += ["", "CPU per message (the broker's own utime + stime over the run / messages, medians):", "",
              "| profile | serving broker us/msg | other replicas us/msg (sum) |", "|---|---:|---:|"]
    for p in [p for p in PROFILES if cpu[p]]:
        lines.append("| %s | %.1f | %.1f |" % (p, statistics.median(x[0] for x in cpu[p]),
                                               statistics.median(x[1] for x in cpu[p])))
    # What bounds the ratio on this machine: when the machine is busy all the time, a
    # profile cannot go faster than its CPUs / (CPU per message of everything it runs).
    ncpu = os.cpu_count()
    lines += ["", "The whole machine (%d CPUs): CPU per message of every process of the run (the four brokers, etcd and the client), "
              "the machine's busy share over the run, and the rate that CPU allows if the machine were busy all the time "
              "(%d x 1,000,000 us / (us per message)):" % (ncpu, ncpu), "",
              "| profile | all processes us/msg | machine busy | steal | CPU-bound ceiling msg/s | achieved / ceiling |",
              "|---|---:|---:|---:|---:|---:|"]
    for p in [p for p in PROFILES if allcpu[p]]:
        tot = statistics.median(x[0] for x in allcpu[p])
        ceil = ncpu * 1e6 / tot
        lines.append("| %s | %.1f | %.0f %% | %.1f %% | %.0f | %.2f |" % (
            p, tot, 100 * statistics.median(x[1] for x in allcpu[p]),
            100 * statistics.median(x[2] for x in allcpu[p]), ceil,
            statistics.median(x[0] for x in res[p]) / ceil))
    table = "\n".join(lines)
    print(table)
    if a.out:
        with open(a.out, "w") as f:
            f.write("Command: bench/repl-acks.py --count %d --reps %d --window %d --warm %g (%s UTC)\n\n%s\n"
                    % (a.count, a.reps, a.window, a.warm, time.strftime("%Y-%m-%d %H:%M", time.gmtime()), table))


if __name__ == "__main__":
    main()
