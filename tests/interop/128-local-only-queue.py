#!/usr/bin/python3
"""Local-only receivers of a queue (issue 33, the leader side; docs/replication.md,
"Local-only links"). A real etcd and three mqd nodes (racks a/b/c, auto_leader_rebalance
off); topic lq with 6 partitions, replication_factor 3, partition p led by node p % 3 + 1.

(a) 40 messages to each partition through its leader (lq/Partitions/p); then on each node
    a receiver of `lq` (the $shared queue) with the link property mqd:fwd-local-only =
    true: it is attached (not redirected, though its node leads 2 of 6), its attach
    echoes the property, and it reads exactly the messages of the partitions its node
    leads: per partition offsets 0..39 in order with their bodies, every message once
    overall. Local-only browsers (distribution-mode copy) on the three nodes see the
    same split, each message once. A receiver of lq without the property on node 1 is
    attached too, forwarded to the leaders (fwd/recv.c), and gets nothing: the queue gave
    every message out.
(b) A node that leads no partition of a topic refuses such a link with amqp:not-found
    naming "leads no partition" (topic ls1, one partition: refused on the two nodes that
    do not lead it, attached on its leader); it is never redirected. A value that is
    not a boolean is refused with amqp:invalid-field.
(c) The legs stay attached while partition 0 moves from node 1 to node 2 (mqctl cluster
    elect): 20 more messages to partition 0 through node 2 go to node 2's receiver only,
    after offset 39 (none of 0..39 again: they were settled before the move), and
    node 1's receiver gets nothing more of partition 0; then back to node 1 (node 1
    starts reading it again at the committed offset, node 2 stops), 20 more; then node 3
    leads it (a node that held no lead of it before), 20 more. No leg is detached;
    every message is read exactly once overall and each partition in offset order.
(d) Node 2's receiver holds 10 deliveries of partition 1 unsettled while partition 1
    moves to node 3: node 3's receiver gets those 10 again (they were not settled: the
    only messages read twice), node 2's late acceptance of them only settles them there;
    10 more through node 3 go to node 3's receiver; partition 1 back on node 2 (after the
    1 s persist): node 2's receiver reads the next 10 and none of the 20 before.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdcluster import Props, Receiver, create_rf3  # noqa: E402
from mqdlegs import spread_cluster, LOCAL_ONLY, Legs, by_partition, elect, log_legs, send_all  # noqa: E402
from mqdtest import SLOW, check, log  # noqa: E402

T = "lq"
N = 40
MORE = 20


class PropReceiver(Receiver):
    """mqdcluster.Receiver with link properties on its attach."""

    def __init__(self, url, address, props):
        super().__init__(url, address, None, idle_s=1.0)
        self.props = props

    def on_start(self, e):
        c = self.connect(e.container, self.url)
        e.container.create_receiver(c, self.address, options=[Props(self.props)] if self.props else None)
        e.container.schedule(0.2, self)


def check_partition(msgs, p, first, n, what):
    """msgs: [(offset, body, leg)] of partition p: the bodies p<p>-<seq> for seqs
    first..first+n-1, in order, at growing offsets (a group's committed-offset records
    take offsets of the log too: they are not delivered)."""
    seqs = [b for _, b, _ in msgs]
    check(seqs == ["p%d-%d" % (p, s) for s in range(first, first + n)],
          "%s: partition %d bodies %r..., want p%d-%d..%d in order" % (what, p, seqs[:8], p, first, first + n - 1))
    offs = [o for o, _, _ in msgs]
    check(offs == sorted(set(offs)), "%s: partition %d offsets not growing: %r" % (what, p, offs[:10]))


def body(t):
    etcd, brokers, lead = spread_cluster(t, T)
    coll = mqdtest.Collect()
    for p, n in sorted(lead.items()):
        send_all(brokers[n].url, "%s/Partitions/%d" % (T, p), ["p%d-%d" % (p, i) for i in range(N)])
    legs = Legs({"leg%d" % i: (brokers[i].url, T) for i in brokers}).start()
    try:
        with coll.case("(a) each node's local-only receiver reads exactly its led partitions"):
            got = legs.wait_count(6 * N)
            log_legs(got)
            check(len(got) == 6 * N, "%d messages, want %d" % (len(got), 6 * N))
            check(set(legs.props) == {"leg1", "leg2", "leg3"}, "attached: %r; ends %r" % (legs.props, legs.ends))
            for n, pr in sorted(legs.props.items()):
                check(pr.get("mqd:fwd-local-only") is True, "%s's attach properties: %r" % (n, pr))
            for p, msgs in sorted(by_partition(got).items()):
                want = "leg%d" % lead[p]
                check({leg for _, _, leg in msgs} == {want},
                      "partition %d read by %r, led by node %d" % (p, {leg for _, _, leg in msgs}, lead[p]))
                check_partition(msgs, p, 0, N, "(a)")
                check([o for o, _, _ in msgs] == list(range(N)), "(a): partition %d offsets %r" % (p, msgs[:5]))
            brs = Legs({"br%d" % i: (brokers[i].url, T) for i in brokers}, browse=True).start()
            try:
                seen = brs.wait_count(6 * N, what="(browsers) ")
            finally:
                brs.stop()
            for p, msgs in sorted(by_partition(seen).items()):
                check({leg for _, _, leg in msgs} == {"br%d" % lead[p]},
                      "browsers: partition %d read by %r, led by node %d" % (p, {leg for _, _, leg in msgs}, lead[p]))
                check_partition(msgs, p, 0, N, "(a) browsers")
            check(len(seen) == 6 * N, "browsers: %d messages, want %d" % (len(seen), 6 * N))
            plain = PropReceiver(brokers[1].url, T, None)
            mqdtest.run_container(plain, 30)
            # forwarded by node 1 (issue 33, fwd/recv.c: legs to every leader), not
            # served locally: the queue gave everything to the legs above already
            check(plain.link_cond is None and not plain.bodies,
                  "a receiver of %s without the property on node 1: %r, %d messages"
                  % (T, plain.link_cond, len(plain.bodies)))
        with coll.case("(b) a node leading no partition refuses a local-only link: amqp:not-found; a bad value"):
            ps = create_rf3(etcd, brokers[1], "ls1")
            for i in brokers:
                r = PropReceiver(brokers[i].url, "ls1", LOCAL_ONLY)
                mqdtest.run_container(r, 30)
                if i == ps["leader"]:
                    check(r.link_cond is None, "node %d (leader) refused it: %r" % (i, r.link_cond))
                else:
                    check(r.link_cond and r.link_cond[0] == "amqp:not-found" and
                          "leads no partition" in (r.link_cond[1] or ""),
                          "node %d: %r" % (i, r.link_cond))
                    log("node %d: %s: %s" % (i, r.link_cond[0], r.link_cond[1]))
            r = PropReceiver(brokers[1].url, T, {"mqd:fwd-local-only": "yes"})
            mqdtest.run_container(r, 30)
            check(r.link_cond and r.link_cond[0] == "amqp:invalid-field" and "boolean" in r.link_cond[1],
                  "mqd:fwd-local-only = \"yes\": %r" % (r.link_cond,))
        with coll.case("(c) partition 0 moves 1 -> 2 -> 1 -> 3: the legs stay, the reads follow"):
            time.sleep(2 * SLOW)  # the committed offsets reach the followers (1 s persist)
            moved_at = len(legs.snapshot())
            base = N
            for new in (2, 1, 3):
                t0 = time.time()
                elect(etcd, brokers[1], T, 0, new)
                send_all(brokers[new].url, "%s/Partitions/0" % T,
                         ["p0-%d" % o for o in range(base, base + MORE)])
                got = legs.wait_count(6 * N + base - N + MORE, what="(node %d leads 0) " % new)
                after = [g for g in got[moved_at:] if g[1] == 0 and g[4] >= t0]
                check({g[0] for g in after} == {"leg%d" % new},
                      "partition 0's messages after the move to node %d came on %r"
                      % (new, sorted({g[0] for g in after})))
                check_partition([(o, b, leg) for leg, _, o, b, _ in after], 0, base, MORE,
                                "(c) node %d" % new)
                log("node %d leads partition 0: its leg read seqs %d..%d" % (new, base, base + MORE - 1))
                base += MORE
                time.sleep(2 * SLOW)
            got = legs.snapshot()
            check(not legs.ends, "legs ended: %r" % legs.ends)
            per = by_partition(got)
            check_partition(per[0], 0, 0, base, "(c) partition 0 overall")
            for p in range(1, 6):
                check_partition(per[p], p, 0, N, "(c) partition %d overall" % p)
            check(len(got) == 5 * N + base, "%d messages overall, want %d" % (len(got), 5 * N + base))
        with coll.case("(d) deliveries unsettled at a move come again from the new leader, once"):
            legs.hold_leg("leg2")
            n0 = len(legs.snapshot())
            send_all(brokers[2].url, "%s/Partitions/1" % T, ["p1-%d" % s for s in range(N, N + 10)])
            legs.wait_count(n0 + 10, what="(held on node 2) ")
            elect(etcd, brokers[1], T, 1, 3)
            legs.wait_count(n0 + 20, what="(again from node 3) ")
            legs.accept_held("leg2")  # settles deliveries of a lead node 2 has left: only settled
            send_all(brokers[3].url, "%s/Partitions/1" % T, ["p1-%d" % s for s in range(N + 10, N + 20)])
            got = legs.wait_count(n0 + 30, what="(more from node 3) ")
            time.sleep(2 * SLOW)  # node 3 logs the committed offset; then back to node 2
            elect(etcd, brokers[1], T, 1, 2)
            send_all(brokers[2].url, "%s/Partitions/1" % T, ["p1-%d" % s for s in range(N + 20, N + 30)])
            got = legs.wait_count(n0 + 40, what="(node 2 again) ")
            new = [(leg, b) for leg, p, _, b, _ in got[n0:]]
            want = [("leg2", "p1-%d" % s) for s in range(N, N + 10)] + \
                   [("leg3", "p1-%d" % s) for s in range(N, N + 20)] + \
                   [("leg2", "p1-%d" % s) for s in range(N + 20, N + 30)]
            log("(d): %s" % ", ".join("%s %s" % x for x in new[::5]))
            check(new == want, "(d): %d messages after the hold: %r, want %r" % (len(new), new[:12], want[:12]))
            check(not legs.ends, "legs ended: %r" % legs.ends)
    finally:
        legs.stop()
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=300)
