#!/usr/bin/python3
"""A follower cut off and healed rejoins the in-sync set within 1 s of the heal (issue 33
point 3; before: 0.5-7 s, TCP's retransmission backoff on the fetch connection and the
reconnect's 10 s connect timeout and 2 s backoff). As root, each of three mqd nodes in
its own network namespace (test 95's layout, mqdnetns.py; skipped without root, `ip` or
`nft`): RF 3, acks = all, min_insync_replicas 2, lease_ttl_ms 3000 and replica_lag_ms
2000 (x MQD_TEST_SLOW). A producer sends batches of 10 to the leader throughout.

(a) ROUNDS cuts (MQD_HEAL_ROUNDS, default 3) of a follower F from the leader L only
    (nft drop both ways in F's namespace; F keeps etcd, so nothing is elected), each
    held until the leader took F out of the in-sync set and then HOLD[i] seconds more
    (1, 4, 8: the longer a cut, the further TCP's backoff has grown), then healed. The
    time from the heal to etcd's state listing F in the ISR again is at most 1 s + 0.5 s
    x SLOW (etcd polled every 20 ms; the leader's log line "rejoins the in-sync set"
    gives the node's own time, logged beside it). The leader and the epoch never
    change.
(b) F SIGSTOPped until it left the ISR, then SIGCONT: back in the ISR within the same
    bound.
(c) a consumer on the leader reads every acknowledged body; the three logs are equal
    byte for byte. The HEAL line of the log has the figures."""

import datetime
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdcluster  # noqa: E402
import mqdnetns  # noqa: E402
import mqdtest  # noqa: E402
from mqdcluster import (Receiver, count_records, get_json, partition_bytes,  # noqa: E402
                        read_keys, wait_for)
from mqdproducer import Producer  # noqa: E402
from mqdtest import SLOW, check, log  # noqa: E402

RACKS = {1: "a", 2: "b", 3: "c"}
KEY = "/mqd/partitions/r3/0"
ROUNDS = int(os.environ.get("MQD_HEAL_ROUNDS", "3") or "3")
HOLD = [1, 4, 8]
LAG_MS = int(2000 * SLOW)
BOUND = 1.0 + 0.5 * SLOW


def in_isr(etcd, f):
    p = get_json(etcd.port, KEY)
    return p if p and f in p["isr"] else None


def wait_out(etcd, f, timeout):
    return wait_for("node %d out of the ISR" % f, lambda: (lambda p: p if p and f not in p["isr"] else None)(
        get_json(etcd.port, KEY)), timeout)


def rejoin_line_time(broker, f, after_wall):
    """The wall-clock time of the leader's first "node F rejoins" line after after_wall."""
    for line in broker.log_text().splitlines():
        if "node %d rejoins the in-sync set" % f not in line:
            continue
        ts = datetime.datetime.strptime(line.split()[0], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
            tzinfo=datetime.timezone.utc).timestamp()
        if ts >= after_wall:
            return ts
    return None


def heal_and_time(etcd, brokers, lead, f, heal):
    """Heals (heal()), then the seconds until etcd lists f in the ISR, and by the log."""
    wall, t0 = time.time(), time.monotonic()
    heal()
    p = wait_for("node %d back in the ISR" % f, lambda: in_isr(etcd, f), 30)
    took = time.monotonic() - t0
    ts = wait_for("the leader's rejoin line", lambda: rejoin_line_time(brokers[lead], f, wall - 0.05), 10)
    return took, ts - wall, p


def run(t, net, np):
    etcd = np.NsEtcd(t)
    etcd.start()
    brokers = {}
    for i, rack in RACKS.items():
        sets = mqdcluster.cluster_sets(etcd, i, rack, replica_lag_ms=LAG_MS, min_insync_replicas=2)
        brokers[i] = np.NsBroker(t, "n%d" % i, net, "n%d" % i, np.NODE_ADDR[i], sets)
        t.brokers.append(brokers[i])
        brokers[i].start()
    wait_for("3 nodes in etcd", lambda: len(read_keys(etcd.port, "/mqd/nodes/")) == 3, 20)
    ps = mqdcluster.create_rf3(etcd, brokers[1])
    wait_for("ISR of 3", lambda: (lambda p: p and len(p["isr"]) == 3)(get_json(etcd.port, KEY)), 20)
    ps = get_json(etcd.port, KEY)
    lead, ep = ps["leader"], ps["epoch"]
    fs = [i for i in RACKS if i != lead]
    prod = Producer(etcd, KEY, brokers, "r3")
    prod.th.start()
    coll = mqdtest.Collect()
    figures = []
    try:
        with coll.case("(a) a follower cut from the leader and healed: back in the ISR within 1 s"):
            for r in range(ROUNDS):
                f = fs[r % 2]
                wait_for("ISR of 3", lambda: (lambda p: p and len(p["isr"]) == 3)(get_json(etcd.port, KEY)), 30)
                net.cut("n%d" % f, [np.NODE_ADDR[lead]])
                try:
                    wait_out(etcd, f, LAG_MS / 1000 + 10)
                    time.sleep(HOLD[r % len(HOLD)] * SLOW)
                except Exception:
                    net.heal("n%d" % f)
                    raise
                took, by_log, p = heal_and_time(etcd, brokers, lead, f, lambda: net.heal("n%d" % f))
                figures.append(took)
                log("(a) round %d: node %d cut from leader %d, held %d s after it left the ISR; back in "
                    "the ISR %.3f s after the heal (etcd), %.3f s by the leader's log; state %r"
                    % (r + 1, f, lead, HOLD[r % len(HOLD)], took, by_log, p))
                check(p["leader"] == lead and p["epoch"] == ep, "the leader or epoch moved: %r" % p)
                check(took <= BOUND, "round %d: %.2f s from the heal to the ISR (bound %.1f s)"
                      % (r + 1, took, BOUND))
        with coll.case("(b) a follower paused past replica_lag_ms and resumed: back within 1 s"):
            f = fs[0]
            wait_for("ISR of 3", lambda: (lambda p: p and len(p["isr"]) == 3)(get_json(etcd.port, KEY)), 30)
            os.kill(brokers[f].pid, signal.SIGSTOP)
            try:
                wait_out(etcd, f, LAG_MS / 1000 + 10)
                time.sleep(1.0 * SLOW)
            except Exception:
                os.kill(brokers[f].pid, signal.SIGCONT)
                raise
            took, by_log, p = heal_and_time(etcd, brokers, lead, f,
                                            lambda: os.kill(brokers[f].pid, signal.SIGCONT))
            figures.append(took)
            log("(b) node %d paused and resumed: back in the ISR %.3f s after SIGCONT (etcd), %.3f s "
                "by the leader's log" % (f, took, by_log))
            check(took <= BOUND, "%.2f s from SIGCONT to the ISR (bound %.1f s)" % (took, BOUND))
    finally:
        prod.stop.set()
        prod.th.join(40 * SLOW)
    if figures:
        log("HEAL heal -> ISR over %d heals: %s s (max %.3f)" % (
            len(figures), " ".join("%.3f" % x for x in figures), max(figures)))
    with coll.case("(c) nothing acknowledged lost, the logs byte-equal"):
        r = Receiver(brokers[lead].url, "r3/ConsumerGroups/g/Partitions/0", None, idle_s=3.0)
        mqdtest.run_container(r, 120)
        acked = [ev[1] for ev in prod.accepted()]
        got = set(r.bodies)
        lost = [b for b in acked if b not in got]
        log("(c) %d accepted, %d read; lost %d" % (len(acked), len(r.bodies), len(lost)))
        check(acked and not lost, "acknowledged and lost: %d, e.g. %r" % (len(lost), lost[:3]))
        time.sleep(1.0 * SLOW)
        for b in brokers.values():
            b.stop()
        raw = {i: partition_bytes(b, "r3", 0) for i, b in brokers.items()}
        log("(c) records per node %r" % {i: count_records(v) for i, v in raw.items()})
        for i in RACKS:
            check(raw[i] == raw[lead], "node %d differs from the leader" % i)
    coll.finish()


def body(t):
    mqdnetns.run_cluster(t, RACKS, run)


if __name__ == "__main__":
    mqdtest.main(body, timeout=300)
