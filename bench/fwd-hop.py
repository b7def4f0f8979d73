#!/usr/bin/python3
"""bench/fwd-hop.py: the price of the forwarding hop (issue 33's benchmark line: durable
1 KiB sends and reads through a non-leader node vs straight to the leader, >= 0.8 of the
direct rate, p50 added <= 1 ms, CPU per message on every node). A real etcd and three
mqd nodes on this machine, loopback only; one RF-3 topic with 1 partition at acks = all,
so that the leader is known (read from etcd), and the client connected either to that
leader (`direct-*`) or to a follower (`fwd-*`: every send and every read forwarded).

  bench/fwd-hop.py [--count N] [--reps R] [--window W] [--warm GB] [--profiles P,..]
                   [--lat-rate R] [--lat-secs S] [--out FILE]

Profiles (build/mqd-bench modes, durable 1 KiB, one connection and link):
  direct-send, fwd-send   send to the topic; latency send -> accepted
  direct-recv, fwd-recv   recv from the topic (its `$shared` queue) what the sends wrote;
                          mqd-bench recv measures no latency
  direct-both, fwd-both   send and receive on one connection (a second topic); latency
                          send -> receive
  direct-sendlat, fwd-sendlat, direct-bothlat, fwd-bothlat
                          send and both paced at --lat-rate msgs/s (default 5000) for
                          --lat-secs (5) seconds: the p50 added by the hop below
                          saturation (at full speed and a fixed window, latency is
                          window / rate, Little's law, and says little about the hop)

Each rep runs every profile once, direct and forwarded next to each other, the pair's
order swapped every other rep, so that the machine's drift hits both alike; a profile's
figure is the median of its reps, and the ratios are given both as ratio of the medians
and as the median of the per-rep ratios. CPU: utime + stime of each node's PID
(/proc/PID/stat) before and after each run, in us per message. A recv with less than
--count messages on the queue first gets them from an unmeasured send to the leader.

--warm GB: as bench/repl-acks.py (writes and deletes GB GiB of zeros first: a cold VM
page cache costs about 4x more per KiB). Every mqd-bench run holds flock
/tmp/mqd-bench.lock (as bench/features.sh). Every process it starts (etcd, three brokers)
is stopped by PID at the end; the temp dir is removed unless KEEP_TMP=1. Needs build/mqd,
build/mqd-bench, build/mqctl and etcd on PATH.
"""

import fcntl
import os
import shutil
import statistics
import subprocess
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
OPS = ("send", "recv", "both", "sendlat", "bothlat")
MODE = {"send": "send", "recv": "recv", "both": "both", "sendlat": "send", "bothlat": "both"}
PROFILES = tuple("%s-%s" % (w, op) for op in OPS for w in ("direct", "fwd"))
TOPIC = {"send": "fh_sr", "recv": "fh_sr", "both": "fh_both", "sendlat": "fh_sr", "bothlat": "fh_both"}
LOCK = "/tmp/mqd-bench.lock"


def create(etcd, broker, topic):
    """An RF-3 topic of 1 partition at acks = all; its state once all 3 are in sync."""
    rc, out, err = mqdtest.mqctl(broker.url, "topic", "create", topic, "--partitions", "1",
                                 "--config", "replication_factor=3", "--config", "acks=all")
    if rc != 0:
        raise SystemExit("topic create %s: %s" % (topic, out + err))
    key = "/mqd/partitions/%s/0" % topic
    wait_for("isr of 3 for " + topic,
             lambda: len((get_json(etcd.port, key) or {}).get("isr", [])) == 3, 20)
    return get_json(etcd.port, key)


def op_of(profile):
    return profile.split("-", 1)[1]


def locked_bench(mode, node, topic, count, window, extra=()):
    extra = list(extra) + (["--idle", "30"] if mode != "send" else [])
    with open(LOCK, "a") as lf:
        fcntl.flock(lf, fcntl.LOCK_EX)
        return run_bench(mode, node.url, topic, count, window, node.proc.pid, extra)


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, f="%.2f"):
    return "–" if x is None else f % x


class Run:
    """One measured mqd-bench run: its figures and each node's CPU us per message."""

    def __init__(self, kv, node_us, client_us, busy):
        self.rate, self.mbs = num(kv, "msgs_per_s"), num(kv, "mb_per_s")
        # recv's "latency" is the age of a backlog written before the run: left out
        self.p50, self.p99 = (None, None) if kv.get("mode") == "recv" else (num(kv, "p50_ms"), num(kv, "p99_ms"))
        self.node_us, self.client_us, self.busy = node_us, client_us, busy


def measure(mode, node, topic, count, window, nodes, extra=()):
    ids = sorted(nodes)
    c0, m0 = [cpu_s(nodes[i].proc.pid) for i in ids], machine()
    kv, _ = locked_bench(mode, node, topic, count, window, extra)
    c1, m1 = [cpu_s(nodes[i].proc.pid) for i in ids], machine()
    busy, idle, _ = (y - x for x, y in zip(m0, m1))
    us = {i: (y - x) * 1e6 / count for i, x, y in zip(ids, c0, c1)}
    return Run(kv, us, client_cpu_s(kv) * 1e6 / count, busy / max(1, busy + idle))


def rep_order(rep, profiles):
    """Each op's direct and fwd profile next to each other, fwd first in odd reps."""
    out = []
    for op in OPS:
        pair = [p for p in ("direct-" + op, "fwd-" + op) if p in profiles]
        out += pair[::-1] if rep % 2 else pair
    return out


def tables(res, roles, profiles):
    lines = ["| profile | msg/s (median) | MB/s | p50 ms | p99 ms | runs msg/s |",
             "|---|---:|---:|---:|---:|---|"]
    for p in profiles:
        r = res[p]
        lines.append("| %s | %.0f | %.1f | %s | %s | %s |" % (
            p, med(x.rate for x in r), med(x.mbs for x in r), fmt(med(x.p50 for x in r)),
            fmt(med(x.p99 for x in r)), ", ".join("%.0f" % x.rate for x in r)))
    lines += ["", "Forwarded vs direct (targets: rate ratio >= 0.8 for send, recv, both at full speed; "
              "p50 added <= 1 ms for the paced *lat rows: at a fixed window latency is window / rate, "
              "and the paced rate ratio is 1 by construction; `met` checks the one that applies):", "",
              "| op | rate fwd/direct (medians) | median of per-rep ratios | p50 added ms (medians) "
              "| median of per-rep p50 added | met |", "|---|---:|---:|---:|---:|---|"]
    for op in OPS:
        d, f = res.get("direct-" + op), res.get("fwd-" + op)
        if not d or not f:
            continue
        ratio = med(x.rate for x in f) / med(x.rate for x in d)
        per_rep = med(y.rate / x.rate for x, y in zip(d, f))
        p50d, p50f = med(x.p50 for x in d), med(x.p50 for x in f)
        added = p50f - p50d if p50d is not None and p50f is not None else None
        per_added = med(y.p50 - x.p50 for x, y in zip(d, f) if x.p50 is not None and y.p50 is not None)
        met = (added is not None and added <= 1.0) if op.endswith("lat") else ratio >= 0.8
        lines.append("| %s | %.2f | %.2f | %s | %s | %s |" % (
            op, ratio, per_rep, fmt(added), fmt(per_added), "yes" if met else "**no**"))
    lines += ["", "CPU per message, us (utime + stime of each process over the run / messages, medians; "
              "the nodes of each op: %s):" % "; ".join(
                  "%s leader n%d, client's follower n%d, other follower n%d" % ((op,) + roles[op])
                  for op in OPS if op in roles), "",
              "| profile | leader | client's follower | other follower | all nodes | client | machine busy |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for p in profiles:
        r = res[p]
        lines.append("| %s | %s | %.1f | %.1f |" % (
            p, " | ".join("%.1f" % med(x.node_us[i] for x in r) for i in roles[op_of(p)]),
            med(sum(x.node_us.values()) for x in r), med(x.client_us for x in r))
            + " %.0f %% |" % (100 * med(x.busy for x in r)))
    return "\n".join(lines)


def git_rev():
    try:
        return subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, timeout=10).stdout.decode().strip() or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def main():
    ap = arg_parser()
    ap.add_argument("--profiles", default=",".join(PROFILES), help="comma-separated subset of %s" % (PROFILES,))
    ap.add_argument("--lat-rate", type=int, default=5000, help="msgs/s of the *-sendlat and *-bothlat profiles")
    ap.add_argument("--lat-secs", type=float, default=5, help="seconds of messages of the *lat profiles")
    a = ap.parse_args()
    profiles = [p for p in PROFILES if p in a.profiles.split(",")]
    if not profiles:
        raise SystemExit("no profile among %s" % (PROFILES,))
    t = mqdtest.Test("fwd-hop-bench")
    if a.warm > 0:
        warm(t.tmpdir, a.warm)
    res = {p: [] for p in profiles}
    try:
        etcd = Etcd(t)
        etcd.start()
        nodes = start_nodes(t, etcd, RACKS)
        ops = sorted({op_of(p) for p in profiles}, key=OPS.index)
        state = {tp: create(etcd, nodes[1], tp) for tp in sorted({TOPIC[op] for op in ops})}
        node_of, backlog = {}, {TOPIC[op]: 0 for op in ops}
        for op in ops:
            lead = state[TOPIC[op]]["leader"]
            fol = min(i for i in nodes if i != lead)
            node_of["direct-" + op], node_of["fwd-" + op] = lead, fol
            print("%s: topic %s, leader node %d, fwd through node %d" % (op, TOPIC[op], lead, fol), flush=True)
        for rep in range(a.reps):
            for p in rep_order(rep, profiles):
                op, topic = op_of(p), TOPIC[op_of(p)]
                if op == "recv" and backlog[topic] < a.count:
                    locked_bench("send", nodes[node_of["direct-recv"]], topic, a.count - backlog[topic], a.window)
                    backlog[topic] = a.count
                n, extra = a.count, []
                if op.endswith("lat"):
                    n, extra = int(a.lat_rate * a.lat_secs), ["--rate", str(a.lat_rate)]
                r = measure(MODE[op], nodes[node_of[p]], topic, n, a.window, nodes, extra)
                backlog[topic] += {"send": n, "sendlat": n, "recv": -n}.get(op, 0)
                res[p].append(r)
                print("rep %d %-11s %8.0f msg/s p50 %s ms p99 %s ms, CPU us/msg %s" % (
                    rep, p, r.rate, fmt(r.p50), fmt(r.p99),
                    " ".join("n%d=%.1f" % (i, r.node_us[i]) for i in sorted(r.node_us))), flush=True)
    finally:
        t.cleanup()
        if not os.environ.get("KEEP_TMP"):
            shutil.rmtree(t.tmpdir, ignore_errors=True)
    roles = {}
    for op in ops:
        lead, fol = node_of["direct-" + op], node_of["fwd-" + op]
        roles[op] = (lead, fol, next(i for i in sorted(nodes) if i not in (lead, fol)))
    table = tables(res, roles, profiles)
    cmd = "bench/fwd-hop.py " + " ".join(sys.argv[1:])
    head = "Command: %s (%s UTC, %s, %d CPUs)\n\n" % (cmd, time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                                                     git_rev(), os.cpu_count())
    print(head + table)
    if a.out:
        with open(a.out, "w") as f:
            f.write(head + table + "\n")


if __name__ == "__main__":
    main()
