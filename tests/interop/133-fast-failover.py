#!/usr/bin/python3
"""Fast failover for a process that died (issue 40 point 4). A real etcd and three mqd
nodes (racks a/b/c, lease_ttl_ms 3000 x MQD_TEST_SLOW, auto_leader_rebalance off), topic
r3: replication_factor 3, acks = all, min_insync_replicas 2, flush = sync. A Proton
producer (mqdcrash.Producer: at-least-once, follows redirects and etcd's key) sends
about 200 a second throughout.

(a) MQD_FASTFAIL_ROUNDS rounds (default 4; the last one first moves the lead to the node
    that holds /mqd/controller, so that the controller dies too): the leader is
    SIGKILLed; the time from the kill to the first acceptance by another node is the
    failover time. Each one is below 2/3 of the lease (the lease path cannot be that
    fast: etcd expires a key no sooner than its TTL after the last keepalive, which goes
    every third of it), a node logged "fast failover: node L's process is dead" and
    the killed node's key left etcd. The killed node starts again and the ISR is 3.
(b) the leader is SIGSTOPped (paused, not dead: its kernel still completes TCP
    handshakes on its port): no node logs the fast path for it, a node logs that its
    port accepted a connection ("not taken as dead"), and the failover comes by its lease:
    no sooner than 2/3 of the lease after the stop. SIGCONT: it steps down, follows and
    the ISR is 3 again.
(c) the producer drained: a consumer reading the partition from its start on the leader
    gets every accepted body (0 acknowledged lost).
The FASTFAIL line of the log has the figures (p50, p99, max). With MQD_FASTFAIL_OFF=1 the
nodes run with fast_failover = off (the figures before the fast path): then (a) asserts
the opposite, no fast-path line and each failover at least 2/3 of the lease."""

import os
import shutil
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdcluster import (TTL_MS, Etcd, Receiver, get_json, read_keys, start_nodes,  # noqa: E402
                        wait_for)
from mqdcrash import KEY, TOPIC, Producer, create_topic, pct, settled_state  # noqa: E402
from mqdtest import SLOW, check, log, skip  # noqa: E402

ROUNDS = int(os.environ.get("MQD_FASTFAIL_ROUNDS", "4") or "4")
OFF = os.environ.get("MQD_FASTFAIL_OFF", "") not in ("", "0")
FAST = "fast failover: node %d's process is dead"
DECLINED = "node %d: a fetch connection to it ended, but its port accepted a connection"


def count(brokers, text):
    return sum(b.log_text().count(text) for b in brokers.values())


def move_to_controller(etcd, brokers):
    """Hands r3/0 to the node holding the controller key (mqctl cluster elect)."""
    ctl = get_json(etcd.port, "/mqd/controller")["id"]
    ps = settled_state(etcd)
    if ps["leader"] != ctl:
        rc, out, err = mqdtest.mqctl(brokers[ctl].url, "cluster", "elect", TOPIC, "0", str(ctl))
        check(rc == 0, "cluster elect: %s" % (out + err))
        wait_for("node %d leads with an ISR of 3" % ctl,
                 lambda: (lambda p: p and p["leader"] == ctl and sorted(p["isr"]) == [1, 2, 3])(
                     get_json(etcd.port, KEY)), 20)
    return ctl


def kill_round(r, etcd, brokers, prod, to_controller):
    wait_for("ISR of 3 before round %d" % r, lambda: settled_state(etcd), 30)
    ctl = move_to_controller(etcd, brokers) if to_controller else None
    ps = settled_state(etcd)
    lead = ps["leader"]
    t_ready = time.monotonic()
    wait_for("an acceptance by node %d" % lead, lambda: prod.first_ack_after(t_ready) is not None, 20)
    before = count(brokers, FAST % lead)
    t_kill = time.monotonic()
    brokers[lead].kill()
    try:
        return measure(r, etcd, brokers, prod, lead, ps, ctl, before, t_kill)
    finally:
        brokers[lead].start()  # whatever the checks said: the next round needs it


def measure(r, etcd, brokers, prod, lead, ps, ctl, before, t_kill):
    got = wait_for("round %d: an acceptance by a new leader" % r,
                   lambda: prod.first_ack_after(t_kill, node_not=lead), 2 * TTL_MS / 1000 + 10)
    took = got - t_kill
    key_gone = wait_for("node %d's key gone" % lead,
                        lambda: "/mqd/nodes/%d" % lead not in read_keys(etcd.port, "/mqd/nodes/")
                        and time.monotonic(), 2 * TTL_MS / 1000 + 6) - t_kill
    ps2 = get_json(etcd.port, KEY)
    fast = count(brokers, FAST % lead) - before
    log("round %d: killed node %d (epoch %d%s); node %d leads in epoch %d; first ack after %.3f s, "
        "key gone after <= %.2f s; fast-path lines %d; %s"
        % (r, lead, ps["epoch"], ", the controller" if ctl == lead else "", ps2["leader"], ps2["epoch"],
           took, key_gone, fast, prod.status()))
    if OFF:
        check(fast == 0, "round %d: the fast path fired with fast_failover = off" % r)
        check(took >= 2 * TTL_MS / 3000.0, "round %d: %.2f s without the fast path?" % (r, took))
    else:
        check(fast >= 1, "round %d: no node took the fast path for node %d" % (r, lead))
        check(took < 2 * TTL_MS / 3000.0, "round %d: failover took %.2f s, not below 2/3 of the "
              "lease" % (r, took))
    if ctl == lead:
        new_ctl = wait_for("a new controller", lambda: (lambda c: c and c["id"] != lead and c)(
            get_json(etcd.port, "/mqd/controller")), 10)
        log("round %d: the controller was node %d, now node %d" % (r, lead, new_ctl["id"]))
    return took


def stop_case(etcd, brokers, prod):
    ps = wait_for("ISR of 3 before the pause", lambda: settled_state(etcd), 30)
    lead = ps["leader"]
    t_ready = time.monotonic()
    wait_for("an acceptance by node %d" % lead, lambda: prod.first_ack_after(t_ready) is not None, 20)
    fast0, declined0 = count(brokers, FAST % lead), count(brokers, DECLINED % lead)
    pid = brokers[lead].pid
    t_stop = time.monotonic()
    os.kill(pid, signal.SIGSTOP)
    try:
        ps2 = wait_for("a new leader after the pause", lambda: (lambda p: p if p["leader"] != lead else None)(
            get_json(etcd.port, KEY)), 2 * TTL_MS / 1000 + 10)
        t_elect = time.monotonic() - t_stop
        got = wait_for("an acceptance by node %d" % ps2["leader"],
                       lambda: prod.first_ack_after(t_stop, node_not=lead), 20)
    finally:
        os.kill(pid, signal.SIGCONT)
    took = got - t_stop
    fast = count(brokers, FAST % lead) - fast0
    declined = count(brokers, DECLINED % lead) - declined0
    log("(b) SIGSTOP of node %d: node %d leads in epoch %d %.2f s after the stop, first ack after "
        "%.2f s; fast-path lines %d, probes that found its port accepting %d"
        % (lead, ps2["leader"], ps2["epoch"], t_elect, took, fast, declined))
    check(fast == 0, "the fast path fired for a paused process")
    check(OFF or declined >= 1, "no node looked at the paused leader's port and declined")
    check(t_elect >= 2 * TTL_MS / 3000.0, "elected %.2f s after the pause: not by the lease" % t_elect)
    wait_for("node %d follows" % lead, lambda: "r3/0: follower (leader %d, epoch %d)"
             % (ps2["leader"], ps2["epoch"]) in brokers[lead].log_text(), 30)
    wait_for("ISR of 3 after the pause", lambda: settled_state(etcd), 30)


def body(t):
    if shutil.which("etcd") is None:
        skip("etcd is not on PATH (Debian: apt-get install etcd-server)")
    etcd = Etcd(t)
    etcd.start()
    brokers = start_nodes(t, etcd, {1: "a", 2: "b", 3: "c"}, lambda i: dict({"auto_leader_rebalance": "off"},
                                                                   **({"fast_failover": "off"} if OFF else {})))
    ps = create_topic(etcd, brokers[1])
    wait_for("both followers fetching", lambda: brokers[ps["leader"]].log_text().count("fetches from") >= 2, 20)
    ports = {i: b.port for i, b in brokers.items()}
    prod = Producer(etcd, KEY, ports, TOPIC).start_thread()
    coll = mqdtest.Collect()
    times = []
    try:
        with coll.case("(a) SIGKILL of the leader: the fast path, below 2/3 of the lease"):
            for r in range(1, ROUNDS + 1):
                times.append(kill_round(r, etcd, brokers, prod, r == ROUNDS))
        with coll.case("(b) SIGSTOP of the leader: no fast path, the lease"):
            stop_case(etcd, brokers, prod)
        prod.paused = True
        wait_for("the producer's sends all settled (%s)" % prod.status(), lambda: prod.unsettled() == 0, 30)
        time.sleep(0.3 * SLOW)
        wait_for("the producer's sends all settled (%s)" % prod.status(), lambda: prod.unsettled() == 0, 30)
    finally:
        prod.stop()
    if times:
        log("FASTFAIL kill -> first ack over %d rounds: p50 %.3f s, p99 %.3f s, max %.3f s, min %.3f s "
            "(lease_ttl_ms %d); all: %s" % (len(times), pct(times, 50), pct(times, 99), max(times),
                                             min(times), TTL_MS, " ".join("%.3f" % x for x in times)))
    with coll.case("(c) nothing acknowledged lost"):
        ps = wait_for("ISR of 3 at the end", lambda: settled_state(etcd), 30)
        rcv = Receiver(brokers[ps["leader"]].url, "r3/ConsumerGroups/end/Partitions/0", None, idle_s=3.0)
        mqdtest.run_container(rcv, 120)
        want = set("s-%d" % s for s in list(prod.acked))
        got = set(rcv.bodies)
        lost = want - got
        log("(c) %d accepted, %d read (%d distinct); lost %d" % (len(want), len(rcv.bodies), len(got), len(lost)))
        check(not lost, "%d acknowledged and lost, e.g. %r" % (len(lost), sorted(lost)[:5]))
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=180 + ROUNDS * 20)
