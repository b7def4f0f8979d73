#!/usr/bin/python3
"""Election by log end (issue 19 point 3; src/repl/cand.c): an `acks = quorum` send is
settled once a majority of the replicas hold it, so an in-sync follower may lack it; the
controller must then elect the in-sync replica with the longest log, never the first in
the in-sync order. A real etcd and three mqd nodes (racks a/b/c), RF-3 topic q3 with
acks = quorum and replica_lag_ms = 60 s (so a follower cut off stays in the ISR). Each
node runs in its own network namespace (as in test 95: veths to a bridge, nft drop
rules); skipped without root, `ip` or `nft`.

(a) 300 sends accepted by the leader L with all three in sync.
(b) S, the follower listed first after L in the ISR (the one the in-sync order would
    elect), is cut from L (not from etcd or F); 200 more sends are accepted (L and the
    other follower F hold them: a majority; S still holds 300 and is still in the ISR);
    L is SIGKILLed; the cut is healed once a new leader is elected.
(c) the controller elects F (the longest log), epoch 2; the nodes logged their log ends
    (S: 300, F: 500) and the controller that every live in-sync replica reported.
(d) a consumer on the new leader reads all 500 accepted bodies in order (before
    cand.c: S was elected and the 200 quorum-accepted sends were gone from every node);
    after L is back, the three logs are byte-equal."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
import mqdcluster  # noqa: E402
import mqdnetns  # noqa: E402
from mqdcluster import (TTL_MS, Receiver, Sender, count_records, get_json,  # noqa: E402
                        partition_bytes, read_keys, stopped_logs_equal, wait_for)
from mqdtest import check, log  # noqa: E402

RACKS = {1: "a", 2: "b", 3: "c"}
KEY = "/mqd/partitions/q3/0"


def send(url, n, prefix):
    s = Sender(url, "q3", n, prefix)
    mqdtest.run_container(s, 60)
    log("%s: %s" % (prefix, s.status()))
    return s


def body(t):
    mqdnetns.run_cluster(t, RACKS, run)


def run(t, net, np):
    etcd = np.NsEtcd(t)
    etcd.start()
    brokers = {}
    for i, rack in RACKS.items():
        sets = mqdcluster.cluster_sets(etcd, i, rack, replica_lag_ms=60000)
        brokers[i] = np.NsBroker(t, "n%d" % i, net, "n%d" % i, np.NODE_ADDR[i], sets)
        t.brokers.append(brokers[i])
        brokers[i].start()
    wait_for("3 nodes in etcd", lambda: len(read_keys(etcd.port, "/mqd/nodes/")) == 3, 20)
    rc, out, err = mqdtest.mqctl(brokers[1].url, "topic", "create", "q3", "--partitions", "1",
                                 "--config", "replication_factor=3", "--config", "acks=quorum")
    check(rc == 0, "topic create: %s" % (out + err))
    wait_for("ISR of 3", lambda: len((get_json(etcd.port, KEY) or {}).get("isr", [])) == 3, 20)
    ps = get_json(etcd.port, KEY)
    lead = ps["leader"]
    L = brokers[lead]
    wait_for("both followers fetching", lambda: L.log_text().count("fetches from") >= 2, 20)
    s_id = [i for i in ps["isr"] if i != lead][0]  # first after the leader: the in-sync order's pick
    f_id = [i for i in RACKS if i not in (lead, s_id)][0]
    log("leader %d, isr %r: S = node %d, F = node %d" % (lead, ps["isr"], s_id, f_id))
    coll = mqdtest.Collect()
    with coll.case("(a) 300 accepted with all three in sync"):
        s = send(L.url, 300, "a")
        check(s.accepted == 300 and not s.rejected, s.status())
        wait_for("both followers at 300", lambda: all(
            count_records(partition_bytes(brokers[i], "q3", 0)) >= 300 for i in (s_id, f_id)), 10)
    with coll.case("(b) S cut from L, 200 quorum sends accepted, L killed"):
        net.cut("n%d" % s_id, [np.NODE_ADDR[lead]])
        try:
            s = send(L.url, 200, "b")
            check(s.accepted == 200 and not s.rejected, s.status())
            wait_for("F at 500", lambda: count_records(partition_bytes(brokers[f_id], "q3", 0)) >= 500, 10)
            held = count_records(partition_bytes(brokers[s_id], "q3", 0))
            st = get_json(etcd.port, KEY)
            log("S holds %d records; state %r" % (held, st))
            check(held == 300, "S holds %d records, want 300" % held)
            check(s_id in st["isr"] and st["epoch"] == 1, "S left the ISR or the epoch moved: %r" % st)
            L.kill()
        except Exception:
            net.heal("n%d" % s_id)
            raise
    with coll.case("(c) the controller elects F, the longest log"):
        # the cut stays until the election: a killed process's kernel still sends what its
        # socket buffers held (the 200) once the path is back
        try:
            st = wait_for("a new leader", lambda: (lambda p: p if p["leader"] != lead else None)(
                get_json(etcd.port, KEY)), 2 * TTL_MS / 1000 + 10)
        finally:
            net.heal("n%d" % s_id)
        log("new state %r" % st)
        check(st["leader"] == f_id and st["epoch"] == 2, "elected %r, want node %d (F)" % (st, f_id))
        text = {i: brokers[i].log_text() for i in (s_id, f_id)}
        check("reporting log end 300" in text[s_id], "S did not report 300")
        check("reporting log end 500" in text[f_id], "F did not report 500")
        check(any("every live in-sync replica reported" in b.log_text() for b in brokers.values() if b.alive()),
              "no controller logged the reports")
    with coll.case("(d) the new leader serves all 500; logs byte-equal after L is back"):
        F = brokers[st["leader"]]
        r = Receiver(F.url, "q3/ConsumerGroups/g/Partitions/0", None, idle_s=2.0)
        mqdtest.run_container(r, 60)
        want = ["a-%d" % i for i in range(300)] + ["b-%d" % i for i in range(200)]
        check(r.bodies == want, "read %d of %d" % (len(r.bodies), len(want)))
        L.start()
        wait_for("ISR of 3", lambda: len(get_json(etcd.port, KEY)["isr"]) == 3, 30)
        stopped_logs_equal(brokers, "q3", 0, st["leader"], 500)
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=240)
