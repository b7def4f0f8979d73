#!/usr/bin/python3
"""Replication: the leader crash loop of issue 19's acceptance. A real etcd and three mqd
nodes (racks a/b/c, lease_ttl_ms 3000 x MQD_TEST_SLOW), topic r3: replication_factor 3,
acks = all, min_insync_replicas = 2, flush = sync.

The loop is mqdcrash.crash_loop (shared with 93). A Proton producer (its own thread) sends "s-<seq>" continuously (about 200 a second,
20 unsettled) and sends again whatever was not accepted, following amqp:link:redirect
and etcd's partition key to the leader (at-least-once). A Proton consumer browses the
partition from offset 0 the same way, re-attaching after the last offset it got, and a
member of group gc reads it (not browsing) and accepts what it gets.

Each round (MQD_CRASH_ROUNDS, default 20): the leader etcd names is SIGKILLed; the time
from the kill to the first acceptance by another node is the failover time; the killed
node starts again and the round ends once etcd's in-sync set holds all three (bounded).
Every third round the killed node starts again at once, before the failover: etcd still
names it leader and it hands the lead over (a hand-over round, timed apart). In every
round both consumers are sent to the restarted node as soon as its port listens, while
it loads its state and its view may lack the leader's key (issue 32 point 4: such a node
served them, as a follower, and offsets went backwards on one link).

At the end (producer stopped, everything settled):
(a) every round failed over (an acceptance by the new leader within 2 x lease + 10 s),
    the restarted node rejoined the ISR; the median failover time (of the rounds that
    waited for the lease) is at most
    lease_ttl_ms + 1 s x SLOW (the issue's target; the max is logged); the clients
    followed amqp:link:redirect at least once (the producer after a lost connection asks,
    in turn, etcd and the next node, which redirects it when it follows; the consumers
    are sent to the restarted node, a follower, each round: with the fast failover of a
    killed leader the producer mostly finds the new leader before any redirect);
(b) epochs only grew: the partition's epoch in etcd is 1 + rounds;
(c) the consumer's offsets ran on one by one (none backwards, no gap but over the control
    records holding the group member's committed offsets) and it got every accepted seq;
(d) all stopped: every replica holds the high watermark's records, equal byte for byte
    below it (one message per offset); each offset's body is the one the consumer read
    there; every accepted seq is in the log; the records' epochs never go down;
(e) only the leader served r3/0 (mqdleaders.py): no group member joined on a node whose
    last r3/0 role line was not `leader`, none stayed attached when a node took another
    role, and every message either consumer got came from a node that led then;
(f) on each of the group member's links the offsets grow, and it got every accepted seq
    (0 lost).
The loop logs a LEADERS line with those figures (kills, wall time, messages, violations)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdcrash import KEY, TOPIC, Producer, crash_loop  # noqa: E402

ROUNDS = int(os.environ.get("MQD_CRASH_ROUNDS", "20") or "20")


def body(t):
    crash_loop(t, lambda etcd, ports: Producer(etcd, KEY, ports, TOPIC).start_thread(), ROUNDS)


if __name__ == "__main__":
    mqdtest.main(body, timeout=120 + ROUNDS * 25)
