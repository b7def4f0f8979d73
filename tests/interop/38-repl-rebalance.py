#!/usr/bin/python3
"""Automatic preferred-leader rebalancing (auto_leader_rebalance, src/repl/rebal.c). A real
etcd and three mqd nodes (racks a/b/c) with leader_rebalance_interval_ms = IV (2 s x
MQD_TEST_SLOW), replica_lag_ms 3 s, replication_user set; auto_leader_rebalance comes from
each node's config file (off at first, then on by SIGHUP). Topic rb: 6 partitions, RF 3,
acks = all, min ISR 2, dedup_window_ms 10 min, so every node is the preferred replica (the
first, as placed) of two partitions. X = the preferred replica of rb/0. A producer sends
to rb/0 throughout (acks = all, message-id = body, resending whatever was not accepted and
following the leader) and a browsing consumer reads rb/0.

(c) auto_leader_rebalance = off: X is SIGKILLed, its partitions fail over (epoch + 1), X
    restarts and is back in every ISR; within 3 intervals after that nothing moves (leaders
    and epochs as after the failover, X leads nothing).
(d) the survivors are switched on (SIGHUP); X is SIGKILLed, leaves every ISR, and restarts
    with a wrong replication_password: alive in etcd but never fetching. Over 3 intervals it
    is not elected anywhere (leaders and epochs unchanged) and the leaders log why: "not in
    the in-sync set".
(a) X restarted with the right password (and on): once it is back in the ISR of each
    partition, within 2 intervals + 2 s it leads exactly its two preferred partitions again
    in etcd, each epoch raised by one (one move per partition; the other four unchanged);
    two more intervals move nothing (no flapping); /metrics counts the moves
    (mqd_repl_preferred_leader_moves_total on the two old leaders sums to 2,
    mqd_repl_preferred_leader 1 everywhere); `mqctl cluster status` names the preferred
    leader (JSON preferred_leader = the first replica; the table's PREFERRED column).
(b) the producer's accepted sends are all read, once each, in send order, and the three
    logs of rb/0 are byte-equal."""

import os
import re
import shutil
import signal
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdcluster import (repl_user_sets, Etcd, cluster_sets, get_json, read_keys, stopped_logs_equal,  # noqa: E402
                        wait_for)
from mqdcrash import Consumer, Producer, drain  # noqa: E402
from mqdtest import SLOW, check, log, skip  # noqa: E402

RACKS = {1: "a", 2: "b", 3: "c"}
NPARTS = 6
IV = 2.0 * SLOW  # leader_rebalance_interval_ms, seconds
TOPIC = "rb"
KEYS = ["/mqd/partitions/%s/%d" % (TOPIC, p) for p in range(NPARTS)]




def states(etcd):
    """[state of rb/p] for p in 0..5 (each {leader, epoch, replicas, isr})."""
    return [get_json(etcd.port, k) for k in KEYS]


def leaders(sts):
    return [(s["leader"], s["epoch"]) for s in sts]


def write_conf(path, on):
    with open(path, "w") as f:
        f.write("auto_leader_rebalance = %s\n" % ("on" if on else "off"))


def reload(b, path, on):
    write_conf(path, on)
    n = b.log_text().count("reloaded ")
    os.kill(b.pid, signal.SIGHUP)
    wait_for("node %s reloaded" % b.name, lambda: b.log_text().count("reloaded ") > n, 10)


def metrics(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10 * SLOW) as r:
        return r.read().decode()


def metric(text, name, labels=""):
    m = re.search(r"^%s%s (\d+)$" % (re.escape(name), re.escape(labels)), text, re.M)
    return int(m.group(1)) if m else None


def body(t):
    if shutil.which("etcd") is None:
        skip("etcd is not on PATH (Debian: apt-get install etcd-server)")
    etcd = Etcd(t)
    etcd.start()
    auth = repl_user_sets()
    mports = {i: mqdtest.free_port() for i in RACKS}
    confs = {i: os.path.join(t.tmpdir, "n%d.conf" % i) for i in RACKS}
    brokers = {}
    for i, rack in RACKS.items():
        write_conf(confs[i], False)
        sets = cluster_sets(etcd, i, rack, replica_lag_ms=int(3000 * SLOW),
                            leader_rebalance_interval_ms=int(IV * 1000),
                            metrics_listen="127.0.0.1:%d" % mports[i])
        sets.update(auth)
        brokers[i] = t.broker("n%d" % i, start=False, sets=sets, conf=confs[i])
    for b in brokers.values():
        b.start()
    wait_for("3 nodes in etcd", lambda: len(read_keys(etcd.port, "/mqd/nodes/")) == 3, 20)
    rc, out, err = mqdtest.mqctl(brokers[1].url, "topic", "create", TOPIC, "--partitions", str(NPARTS),
                                 "--config", "replication_factor=3", "--config", "acks=all",
                                 "--config", "min_insync_replicas=2", "--config", "dedup_window_ms=600000")
    check(rc == 0, "topic create: %s" % (out + err))
    sts = wait_for("6 partitions placed, ISR 3 each", lambda: (lambda s: s if all(
        x and len(x["isr"]) == 3 for x in s) else None)(states(etcd)), 30)
    pref = [s["replicas"][0] for s in sts]
    log("placement: preferred %r, leaders %r" % (pref, leaders(sts)))
    check(sorted(pref) == [1, 1, 2, 2, 3, 3], "each node preferred for two partitions: %r" % pref)
    check([s["leader"] for s in sts] == pref, "leaders as placed: %r" % leaders(sts))
    x = pref[0]
    mine = [p for p in range(NPARTS) if pref[p] == x]
    others = [i for i in RACKS if i != x]
    ports = {i: b.port for i, b in brokers.items()}
    prod = Producer(etcd, KEYS[0], ports, "%s/Partitions/0" % TOPIC, prefix="s", rate=100,
                    msg_ids=True).start_thread()
    cons = Consumer(etcd, KEYS[0], ports, TOPIC).start_thread()
    wait_for("first acceptances", lambda: len(prod.acked) > 50, 20)
    coll = mqdtest.Collect()
    try:
        with coll.case("(c) off: nothing moves back within 3 intervals"):
            brokers[x].kill()
            failed = wait_for("node %d's partitions failed over" % x, lambda: (lambda s: s if all(
                s[p]["leader"] != x and s[p]["epoch"] == 2 for p in mine) else None)(states(etcd)),
                2 * mqdtest_ttl() + 10)
            log("after the failover: %r" % leaders(failed))
            brokers[x].start()
            wait_for("node %d back in every ISR" % x, lambda: all(
                x in s["isr"] for s in states(etcd)), 30)
            after = leaders(states(etcd))
            time.sleep(3 * IV)
            now = leaders(states(etcd))
            log("3 intervals later: %r" % now)
            check(now == after, "moved with auto_leader_rebalance off: %r -> %r" % (after, now))
            check(all(s[0] != x for s in now), "node %d leads: %r" % (x, now))
        with coll.case("(d) a preferred replica alive but out of the ISR is not elected"):
            for i in others:
                reload(brokers[i], confs[i], True)
            write_conf(confs[x], True)
            brokers[x].kill()
            wait_for("node %d out of every ISR" % x, lambda: all(
                x not in s["isr"] for s in states(etcd)), 10 + 3 * SLOW)
            brokers[x].sets["replication_password"] = "wrong"
            brokers[x].start()
            wait_for("node %d alive in etcd" % x, lambda: "/mqd/nodes/%d" % x in read_keys(etcd.port, "/mqd/nodes/"), 10)
            before = leaders(states(etcd))
            marks = {i: len(brokers[i].log_text()) for i in others}
            time.sleep(3 * IV + 1.0 * SLOW)
            sts = states(etcd)
            log("node %d up, out of the ISR, 3 intervals later: %r" % (x, leaders(sts)))
            check(leaders(sts) == before, "moved: %r -> %r" % (before, leaders(sts)))
            check(all(x not in s["isr"] for s in sts), "node %d in an ISR: %r" % (x, sts))
            why = "not handed back to node %d: not in the in-sync set" % x
            said = [i for i in others if why in brokers[i].log_text()[marks[i]:]]
            check(said, "no leader logged %r" % why)
        with coll.case("(a) back in the ISR, it leads exactly its preferred partitions again"):
            before = leaders(states(etcd))
            brokers[x].kill()
            brokers[x].sets["replication_password"] = "s3cret"
            t_start = time.monotonic()
            brokers[x].start()
            t_in = {}

            def back():
                s = states(etcd)
                for p in range(NPARTS):
                    if x in s[p]["isr"] and p not in t_in:
                        t_in[p] = time.monotonic()
                return s if all(s[p]["leader"] == x for p in mine) else None
            moved = wait_for("node %d leads %r again" % (x, mine), back, 2 * IV + 30)
            t_lead = time.monotonic()
            wait_for("node %d in every ISR" % x, lambda: back() is not None and len(t_in) == NPARTS, 10)
            last_in = max(t_in[p] for p in mine)
            log("node %d: started, in the ISR %.2f s later (%s), leads %r %.2f s after the last "
                "of those ISR rejoins (%.2f s after its start); IV %.1f s"
                % (x, last_in - t_start, ", ".join("rb/%d %.2f" % (p, t_in[p] - t_start) for p in sorted(t_in)),
                   mine, t_lead - last_in, t_lead - t_start, IV))
            check(t_lead - last_in <= 2 * IV + 2.0 * SLOW,
                  "took %.2f s after the ISR rejoin (bound %.2f s)" % (t_lead - last_in, 2 * IV + 2 * SLOW))
            for p in range(NPARTS):
                want = (x, before[p][1] + 1) if p in mine else before[p]
                check((moved[p]["leader"], moved[p]["epoch"]) == want,
                      "rb/%d: leader/epoch %r, want %r" % (p, (moved[p]["leader"], moved[p]["epoch"]), want))
            check(sorted(p for p in range(NPARTS) if moved[p]["leader"] == x) == mine,
                  "node %d leads %r" % (x, [p for p in range(NPARTS) if moved[p]["leader"] == x]))
            time.sleep(2 * IV)
            later = leaders(states(etcd))
            check(later == leaders(moved), "moved again: %r -> %r" % (leaders(moved), later))
            total = 0
            for i in others:
                m = metrics(mports[i])
                v = metric(m, "mqd_repl_preferred_leader_moves_total")
                check(v is not None, "node %d: no mqd_repl_preferred_leader_moves_total" % i)
                total += v
                lines = [ln for ln in brokers[i].log_text().splitlines() if "leads again, in epoch" in ln]
                log("node %d: %d moves; %s" % (i, v, " | ".join(ln.split("repl: ")[-1] for ln in lines)))
            check(total == len(mine), "moves counted %d, want %d" % (total, len(mine)))
            m = metrics(mports[x])
            for p in range(NPARTS):
                v = metric(m, "mqd_repl_preferred_leader", '{topic="rb",partition="%d"}' % p)
                check(v == 1, "node %d: mqd_repl_preferred_leader of rb/%d = %r" % (x, p, v))
            from mqdcrash import cluster_status
            st = cluster_status(brokers[x].url)
            ps = {p["partition"]: p for p in st["partitions"] if p["topic"] == TOPIC}
            check(all(ps[p]["preferred_leader"] == moved[p]["replicas"][0] for p in range(NPARTS)),
                  "preferred_leader in cluster status: %r" % {p: ps[p].get("preferred_leader") for p in ps})
            rc, out, err = mqdtest.mqctl(brokers[x].url, "cluster", "status")
            check(rc == 0 and "PREFERRED" in out, "cluster status table: %s" % (out + err))
            log(out.strip().splitlines()[-NPARTS - 1:])
        with coll.case("(b) every accepted send read once, in order; logs byte-equal"):
            want = drain(prod, cons, etcd)
            log("%s; %s" % (prod.status(), cons.status()))
            got = [cons.seen[o] for o in sorted(cons.seen)]
            seqs = [int(b.split("-")[1]) for b in got]
            check(not cons.order_errors, "consumer order errors %r" % cons.order_errors[:5])
            check(len(got) == len(set(got)), "%d bodies read twice" % (len(got) - len(set(got))))
            check(set(got) == want, "read %d, accepted %d: missing %r, unexpected %r" % (
                len(got), len(want), sorted(want - set(got))[:5], sorted(set(got) - want)[:5]))
            check(seqs == sorted(seqs), "bodies out of send order")
            check(len(want) > 500, "only %d accepted" % len(want))
            stopped_logs_equal(brokers, TOPIC, 0, get_json(etcd.port, KEYS[0])["leader"], len(want))
    finally:
        prod.stop_flag.set()
        cons.stop_flag.set()
    coll.finish()


def mqdtest_ttl():
    from mqdcluster import TTL_MS
    return TTL_MS / 1000


if __name__ == "__main__":
    mqdtest.main(body, timeout=300)
