#!/usr/bin/python3
"""Replication: the leader crash loop of 92 (mqdcrash.crash_loop: etcd, three nodes, r3
with acks = all, min_insync_replicas = 2, flush = sync; SIGKILL of the leader and
restart per round) with a rhea producer (node, crash-rhea-producer.js) that handles
amqp:link:redirect itself: the redirect contract holds for a second AMQP stack, not only
for Proton. MQD_CRASH_ROUNDS_RHEA rounds (default 5). The same figures are asserted:
the median failover (kill -> first acceptance by the new leader) at most lease_ttl_ms +
1 s x SLOW, the producer followed at least one redirect, the epoch is 1 + rounds, the
Proton consumer's offsets ran on one by one with every accepted seq read, the replicas
are byte-equal below the high watermark and every accepted seq is in the log; and 92's
(e) and (f): only the leader served the partition's consumers, offsets grow on each link
of the group member and it got every accepted seq."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdcrash import TOPIC, RheaProducer, crash_loop  # noqa: E402

ROUNDS = int(os.environ.get("MQD_CRASH_ROUNDS_RHEA", "5") or "5")


def body(t):
    crash_loop(t, lambda etcd, ports: RheaProducer(t, ports, TOPIC), ROUNDS)


if __name__ == "__main__":
    mqdtest.main(body, timeout=120 + ROUNDS * 25)
