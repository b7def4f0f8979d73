#!/usr/bin/python3
"""Forwarded receivers across a leader failover (issue 33 point 3): a client connected to
a surviving node only sees a pause. A real etcd and three mqd nodes (racks a/b/c,
auto_leader_rebalance off), topic r3 (1 partition, replication_factor 3, acks = all,
min_insync_replicas 2, flush = sync). Node M is a follower of r3/0 when the test starts;
a producer (100 a second, at-least-once, mqdcrash.Producer) and a member of group gc
(`r3/ConsumerGroups/gc/Partitions/0`, accepting each message, mqdcrash.GroupConsumer)
are connected to M only: M forwards the sends and the receiver to the leader.

MQD_FWD_FAILOVER_ROUNDS rounds (default 3): the leader, when it is not M, is SIGKILLed
(when M leads, `mqctl cluster elect` first hands the partition to another in-sync node),
and started again once a new leader accepted.
- the member's link is the one it attached at the start: no link error, no reattach (the
  client's link stays attached across every failover; its leg moves to the new leader);
- drained at the end: every accepted seq was read at least once;
- no offset comes twice on the member's one link (it never releases): the new leader
  redelivers from the committed offset it has (the unsettled deliveries went with the
  leg, and the last second of acceptances may not have reached it), and the member's node
  binds a redelivery to the copy the member still holds, or applies the member's
  acceptance to it, instead of sending it again (docs/replication.md, "Forwarded
  receivers");
- the pause per round (kill -> first message on the member's link from a record sent
  after the kill, and kill -> first acceptance of the producer) is logged, and the
  receive pause is at most 2 x lease + 10 s x SLOW."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdcluster import TTL_MS, get_json, wait_for  # noqa: E402
from mqdcrash import (KEY, TOPIC, GroupConsumer, Producer, create_topic, on_node,  # noqa: E402
                     fwd_cluster, settled_state, twice)
from mqdtest import SLOW, check, log  # noqa: E402

RACKS = {1: "a", 2: "b", 3: "c"}
ROUNDS = int(os.environ.get("MQD_FWD_FAILOVER_ROUNDS", "3") or "3")


def elect_away(etcd, brokers, m):
    """Hands r3/0 from M to another in-sync node (M must stay up: its clients are ours)."""
    ps = get_json(etcd.port, KEY)
    other = next(i for i in ps["isr"] if i != m)
    rc, out, err = mqdtest.mqctl(brokers[other].url, "cluster", "elect", TOPIC, "0", str(other))
    check(rc == 0, "cluster elect: %s" % (out + err))
    wait_for("node %d leading r3/0" % other, lambda: get_json(etcd.port, KEY)["leader"] == other, 20)
    log("r3/0 handed from node %d to node %d" % (m, other))


def one_round(r, etcd, brokers, m, prod, gc):
    ps = wait_for("ISR of 3 before round %d" % r, lambda: settled_state(etcd), 40)
    if ps["leader"] == m:
        elect_away(etcd, brokers, m)
        ps = wait_for("ISR of 3 before round %d" % r, lambda: settled_state(etcd), 40)
    lead = ps["leader"]
    t_ready = time.monotonic()
    wait_for("an acceptance before round %d" % r, lambda: prod.first_ack_after(t_ready) is not None, 20)
    seq_kill = prod.next_seq
    t_kill = time.monotonic()
    wall_kill = time.time()
    brokers[lead].kill()
    t_ack = wait_for("round %d: an acceptance after the kill" % r,
                     lambda: prod.first_ack_after(t_kill), 2 * TTL_MS / 1000 + 20)

    def first_new():
        for _, _, _, b, t in list(gc.deliveries):
            if t > wall_kill and int(b.split("-")[-1]) >= seq_kill:
                return t
        return None
    t_recv = wait_for("round %d: the member reading records sent after the kill (%s)" % (r, gc.status()),
                      first_new, 2 * TTL_MS / 1000 + 20)
    brokers[lead].start()
    ps2 = get_json(etcd.port, KEY)
    send_pause, recv_pause = t_ack - t_kill, t_recv - wall_kill
    log("round %d: killed node %d (epoch %d); node %d leads in epoch %d; send pause %.2f s, "
        "receive pause %.2f s; %s; %s" % (r, lead, ps["epoch"], ps2["leader"], ps2["epoch"],
                                          send_pause, recv_pause, prod.status(), gc.status()))
    return wall_kill, send_pause, recv_pause


def body(t):
    etcd, brokers = fwd_cluster(t, RACKS)
    ps = create_topic(etcd, brokers[1])
    wait_for("ISR of 3", lambda: settled_state(etcd), 40)
    ps = get_json(etcd.port, KEY)
    m = next(i for i in sorted(RACKS) if i != ps["leader"])
    log("r3/0 led by node %d; the clients are on node %d" % (ps["leader"], m))
    ports = {m: brokers[m].port}
    prod = on_node(Producer, brokers[m].port)(etcd, KEY, ports, TOPIC, rate=100).start_thread()
    gc = on_node(GroupConsumer, brokers[m].port)(etcd, KEY, ports, TOPIC).start_thread()
    coll = mqdtest.Collect()
    rounds = []
    try:
        wait_for("the member reading through node %d (%s)" % (m, gc.status()), lambda: len(gc.deliveries) > 20, 30)
        for r in range(1, ROUNDS + 1):
            rounds.append(one_round(r, etcd, brokers, m, prod, gc))
        wait_for("ISR of 3 at the end", lambda: settled_state(etcd), 40)
        prod.paused = True
        wait_for("the producer's sends all settled (%s)" % prod.status(), lambda: prod.unsettled() == 0, 30)
        time.sleep(0.3 * SLOW)
        wait_for("the producer's sends all settled (%s)" % prod.status(), lambda: prod.unsettled() == 0, 30)
        want = set("%s-%d" % (prod.prefix, s) for s in list(prod.acked))
        wait_for("the member has every accepted seq (%s)" % gc.status(), lambda: want <= set(list(gc.bodies)), 40)
    finally:
        for c in (prod, gc):
            c.stop_flag.set()
    log("%s; %s" % (prod.status(), gc.status()))
    sends = sorted(s for _, s, _ in rounds)
    recvs = sorted(x for _, _, x in rounds)
    log("pauses over %d rounds: send p50 %.2f max %.2f s; receive p50 %.2f max %.2f s"
        % (len(rounds), sends[len(sends) // 2], sends[-1], recvs[len(recvs) // 2], recvs[-1]))
    with coll.case("the member's link stayed attached (no link error, no reattach)"):
        check(gc.links == 1 and not gc.errors and gc.reconnects == 1,
              "links %d, errors %r, connections %d" % (gc.links, gc.errors, gc.reconnects))
    with coll.case("every accepted seq read at least once"):
        check(want <= set(gc.bodies), "%d accepted seqs not read" % len(want - set(gc.bodies)))
    with coll.case("no offset twice on the link"):
        bad = twice(list(gc.deliveries))
        check(not bad, "%d offsets twice (link, offset): %r" % (len(bad), bad[:5]))
    with coll.case("the receive pause is bounded"):
        check(recvs[-1] <= 2 * TTL_MS / 1000 + 10 * SLOW, "max receive pause %.2f s" % recvs[-1])
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=180 + ROUNDS * 40)
