#!/usr/bin/python3
"""A consumer group over leaders, served by local-only legs (issue 33, the leader side;
docs/replication.md, "Local-only links"). A real etcd and three mqd nodes (racks a/b/c,
auto_leader_rebalance off); topic lg with 6 partitions, replication_factor 3, partition
p led by node p % 3 + 1. Two members of group g, m1 and m2, as two entry nodes would
serve them: each member has one leg (a receiver of lg/ConsumerGroups/g with the link
property mqd:fwd-local-only = true) on each of the three leaders, six legs in all.
Messages go to each partition through its leader with partition keys (4 keys a
partition), body <key>-<seq>.

(a) once the six legs are attached, 40 messages a partition: every partition is read by exactly one leg cluster-wide,
    and a leg reads only partitions its node leads; each message exactly once, the
    seqs of each key in order, a partition's bodies in send order at growing offsets; both members get
    partitions overall (each leader splits its two partitions between the two legs
    there).
(b) m1's leg on node 1 detaches: node 1's partitions go to m2's leg there; 20 more
    messages a partition of node 1 are read by m2's leg on node 1, exactly once, after
    the offsets read before (no earlier offset again).
(c) Committed offsets survive a leader failover: after the 1 s persist, node 3 is
    SIGKILLed; its partitions (2 and 5) fail over to nodes 1 and 2, whose legs stay
    attached and take them (a rebalance, no detach); 20 more messages to each of them
    through its new leader are read exactly once, after offset 39: nothing that was
    accepted before the failover is read again.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdcluster import TTL_MS, wait_for  # noqa: E402
from mqdlegs import spread_cluster, Legs, by_partition, leaders, log_legs, send_all  # noqa: E402
from mqdtest import SLOW, check, log  # noqa: E402

T = "lg"
ADDR = T + "/ConsumerGroups/g"
N = 40
MORE = 20
KEYS = 4


def bodies(p, first, n):
    """Bodies k<p>.<key>-<seq> for the seqs first..first+n-1 of partition p."""
    return ["k%d.%d-%d" % (p, s % KEYS, s) for s in range(first, first + n)]


def key_of(b):
    return b.split("-")[0]


def check_once_in_order(got, what):
    """Every body once; per key the seqs grow; per partition the offsets grow."""
    seen = {}
    for leg, p, off, b, _ in got:
        seen.setdefault(b, []).append((leg, p, off))
    twice = {b: v for b, v in seen.items() if len(v) > 1}
    check(not twice, "%s: %d messages read more than once: %r" % (what, len(twice), list(twice.items())[:3]))
    last = {}
    for _, p, off, b, _ in got:
        k, s = key_of(b), int(b.split("-")[1])
        check(last.get(k, -1) < s, "%s: key %s: seq %d after %d" % (what, k, s, last.get(k, -1)))
        last[k] = s
    for p, msgs in by_partition(got).items():
        offs = [o for o, _, _ in msgs]
        check(offs == sorted(offs), "%s: partition %d offsets out of order: %r" % (what, p, offs[:10]))


def check_more(new, p, what):
    """The MORE later messages of partition p: their bodies in order, at offsets after the
    first N (a group's committed-offset records take offsets too: never delivered)."""
    got = [(g[2], g[3]) for g in new if g[1] == p]
    check([b for _, b in got] == bodies(p, N, MORE), "partition %d %s: %r" % (p, what, got[:6]))
    check(all(o >= N for o, _ in got), "partition %d %s: offsets %r" % (p, what, [o for o, _ in got][:8]))


def body(t):
    etcd, brokers, lead = spread_cluster(t, T)
    coll = mqdtest.Collect()
    legs = Legs({"m%d@%d" % (m, i): (brokers[i].url, ADDR) for m in (1, 2) for i in brokers}).start()
    try:
        # every member's legs first: a member alone in the group reads every partition its
        # leader has until the next one joins (as on a single node)
        wait_for("six legs attached", lambda: len(legs.props) == 6, 20)
        for p, n in sorted(lead.items()):
            send_all(brokers[n].url, "%s/Partitions/%d" % (T, p), bodies(p, 0, N), key_of)
        with coll.case("(a) each partition read by one leg on its leader, each message once"):
            got = legs.wait_count(6 * N)
            log_legs(got)
            check(len(got) == 6 * N, "%d messages, want %d" % (len(got), 6 * N))
            owner = {}
            for p, msgs in sorted(by_partition(got).items()):
                ls = {leg for _, _, leg in msgs}
                check(len(ls) == 1, "partition %d read by %r" % (p, sorted(ls)))
                leg = ls.pop()
                owner[p] = leg
                check(leg.endswith("@%d" % lead[p]), "partition %d (led by %d) read by %s" % (p, lead[p], leg))
                check([b for _, b, _ in msgs] == bodies(p, 0, N), "partition %d: %r" % (p, msgs[:5]))
            check_once_in_order(got, "(a)")
            members = {leg.split("@")[0] for leg in owner.values()}
            check(members == {"m1", "m2"}, "partitions by leg %r: members %r" % (owner, members))
            log("owners: %r" % owner)
        with coll.case("(b) m1's leg on node 1 detaches: node 1's partitions go to m2's leg there"):
            legs.close_leg("m1@1")
            time.sleep(1 * SLOW)
            mine = [p for p, n in lead.items() if n == 1]
            n0 = len(legs.snapshot())
            for p in mine:
                send_all(brokers[1].url, "%s/Partitions/%d" % (T, p), bodies(p, N, MORE), key_of)
            got = legs.wait_count(n0 + MORE * len(mine), what="(node 1's partitions) ")
            new = got[n0:]
            check(len(new) == MORE * len(mine), "%d new messages, want %d" % (len(new), MORE * len(mine)))
            check({g[0] for g in new} == {"m2@1"}, "node 1's new messages read by %r" % sorted({g[0] for g in new}))
            for p in mine:
                check_more(new, p, "after the detach")
            check_once_in_order(got, "(b)")
        with coll.case("(c) node 3 SIGKILLed: its partitions fail over, read on from the committed offsets"):
            time.sleep(2.5 * SLOW)  # the committed offsets reach the followers (1 s persist)
            gone = [p for p, n in lead.items() if n == 3]
            n0 = len(legs.snapshot())
            brokers[3].kill()
            wait_for("partitions %r led by nodes 1 or 2" % gone,
                     lambda: all(leaders(etcd, T, 6)[p] in (1, 2) for p in gone), TTL_MS / 1000 + 20)
            now = leaders(etcd, T, 6)
            log("after the failover: leaders %r" % now)
            for p in gone:
                send_all(brokers[now[p]].url, "%s/Partitions/%d" % (T, p), bodies(p, N, MORE), key_of)
            got = legs.wait_count(n0 + MORE * len(gone), what="(failed over) ")
            new = got[n0:]
            check(len(new) == MORE * len(gone), "%d messages after the failover, want %d: %r"
                  % (len(new), MORE * len(gone), [(g[0], g[1], g[2]) for g in new][:10]))
            for p in gone:
                ls = {g[0] for g in new if g[1] == p}
                check(len(ls) == 1 and ls.pop().endswith("@%d" % now[p]),
                      "partition %d (now led by %d) read by %r" % (p, now[p], {g[0] for g in new if g[1] == p}))
                check_more(new, p, "after the failover")
            check_once_in_order(got, "(c)")
            ended = [e for e in legs.ends if not e[0].endswith("@3")]
            check(not ended, "legs on nodes 1 and 2 ended: %r" % ended)
    finally:
        legs.stop()
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=300)
