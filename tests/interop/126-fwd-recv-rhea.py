#!/usr/bin/python3
"""Forwarded receivers for a second AMQP stack (issue 33): rhea (node, fwd-recv-rhea.js)
reads a `$shared` queue through a node that does not lead every partition. A real etcd
and three mqd nodes (mqdfwd.start_cluster: SASL PLAIN users, an [acl]), topic orders.rh
(6 partitions, replication_factor 3, leaders on every node); 600 keyed messages (12 keys)
sent through node 1 (forwarded to each partition's leader); rhea, logged in as admin,
attaches a receiver on `orders.rh` at the node that leads the fewest partitions and
reads: every message exactly once (2 s x SLOW more after the last one show no
duplicate), each key's messages in order, x-opt-partition-id and x-opt-offset set; the
link is never refused or detached (no amqp:link:redirect: rhea treats one as fatal)."""

import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdcluster import Etcd  # noqa: E402
from mqdfwd import PW, create_topic, keyed, send_all, start_cluster, url_as  # noqa: E402
from mqdtest import SLOW, check, log, skip  # noqa: E402

TOPIC = "orders.rh"
N = 600
NKEYS = 12
HERE = os.path.dirname(os.path.abspath(__file__))


def body(t):
    if shutil.which("etcd") is None:
        skip("etcd is not on PATH (Debian: apt-get install etcd-server)")
    if shutil.which("node") is None or not (
            os.path.isdir(os.path.join(HERE, "node", "node_modules", "rhea"))):
        skip("node or rhea missing (cd tests/interop/node && npm ci)")
    etcd = Etcd(t)
    etcd.start()
    brokers = start_cluster(t, etcd)
    lead = create_topic(etcd, brokers[1], TOPIC)
    log("leaders: %r" % lead)
    check(len(set(lead.values())) == 3, "the leaders are not on all three nodes: %r" % lead)
    send_all(url_as(brokers[1], "admin"), TOPIC, N, lambda i: keyed(i, NKEYS, "rh"))
    x = min(brokers, key=lambda i: sum(1 for v in lead.values() if v == i))
    log("rhea reads %s through node %d (it leads %d of 6 partitions)"
        % (TOPIC, x, sum(1 for v in lead.values() if v == x)))
    p = subprocess.run(["node", os.path.join(HERE, "fwd-recv-rhea.js"), str(brokers[x].port),
                        "admin", PW["admin"], TOPIC, str(N), str(int(2000 * SLOW))],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120 * SLOW)
    lines = p.stdout.decode().splitlines()
    errs = [ln for ln in lines if ln.startswith("E ")]
    msgs = [ln.split(" ") for ln in lines if ln.startswith("M ")]
    log("rhea: exit %d, %d messages, errors %r, stderr %s" % (p.returncode, len(msgs), errs,
                                                               p.stderr.decode()[-500:]))
    check(p.returncode == 0 and not errs, "rhea's receiver failed: %r" % errs)
    bodies = [m[1] for m in msgs]
    want = sorted("rh:k%d:%d" % (i % NKEYS, i) for i in range(N))
    check(sorted(bodies) == want, "got %d messages (%d distinct) of %d" % (len(bodies), len(set(bodies)), N))
    last = {}
    for b in bodies:
        _, k, i = b.split(":")
        check(int(i) > last.get(k, -1), "key %s out of order: %s after %d" % (k, i, last.get(k, -1)))
        last[k] = int(i)
    check(all(m[2] != "undefined" and m[3] != "undefined" for m in msgs),
          "a message without x-opt-partition-id / x-opt-offset")


if __name__ == "__main__":
    mqdtest.main(body, timeout=240)
