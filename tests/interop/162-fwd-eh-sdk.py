#!/usr/bin/python3
"""The @azure/event-hubs SDK through nodes that do not lead the partitions (issue 33,
src/fwd): a real etcd and three nodes (mqdfwd.py; SASL ANONYMOUS allowed on the hub as the
SDKs log in, a [sas_key root] that $cbs verifies), hub eh162 with 6 partitions and
replication_factor 3 led by all three nodes. fwd-eh-client.js, on node 1 only, sends
Event Hubs batches (message-format 0x80013700) by partition id (5 per partition, and an
array of 3 to partition 5) and by partition key (4 per key, 12 keys; the k0 batch sent
twice with the same message ids): all accepted, batches to the 4 partitions led elsewhere
forwarded on mqd:batch links. Checked:
- each partition, read from its leader with Proton, holds exactly the events sent to it
  (keyed ones in the partition murmur2 picks, in order per key), each once (the retried
  batch kept once by its inner messages' ids);
- on node 1, getEventHubProperties names 6 partitions and getPartitionProperties of
  every partition (4 led elsewhere) counts what was sent (last sequence number and
  offset = count - 1, begin 0, not empty), and a wrong key is refused by $cbs there;
- an EventHubConsumerClient on node 2 reads every partition from the earliest position
  (through forwarded receivers for the partitions node 2 does not lead): every event
  exactly once, sequence numbers 0..n-1 in order per partition, offsets as strings equal
  to them, bodies and partition keys as sent;
- mqd:batch from a client (not a node) is ignored: a Proton sender with it, straight to
  a partition's leader, gets its plain messages stored as such."""

import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdcluster import Sender  # noqa: E402
from mqdfwd import NPARTS, cluster_with_topic, read_partitions  # noqa: E402
from mqdtest import SLOW, check, log, skip  # noqa: E402

HUB = "eh162"
KEY = "root-key-162"
NKEYS = 12


def expected():
    """{partition: [body, ...]} in send order."""
    want = {p: [] for p in range(NPARTS)}
    for p in range(NPARTS):
        want[p] += ["pid:%d:%d" % (p, i) for i in range(5)]
    want[NPARTS - 1] += ["arr:%d" % i for i in range(3)]
    for k in range(NKEYS):
        want[mqdtest.kafka_partition("k%d" % k, NPARTS)] += ["key:k%d:%d" % (k, j) for j in range(4)]
    return want


def body(t):
    if shutil.which("node") is None:
        skip("node is not on PATH")
    etcd, brokers, lead = cluster_with_topic(
        t, HUB, anonymous=HUB, more="[sas_key root]\nkey = %s\nrights = manage\n" % KEY)
    check(sum(1 for v in lead.values() if v != 1) >= 2 and sum(1 for v in lead.values() if v != 2) >= 2,
          "nodes 1 and 2 should each not lead some partitions: %r" % lead)
    client = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fwd-eh-client.js")
    p = subprocess.run(["node", client, str(brokers[1].port), str(brokers[2].port), HUB, KEY, str(NKEYS)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=200 * SLOW)
    if p.returncode == 77:
        skip("@azure/event-hubs not installed (cd tests/interop/node && npm ci)")
    log("client stderr: %s" % p.stderr.decode().strip()[-1500:])
    check(p.stdout.strip(), "no output from the client (rc %d)" % p.returncode)
    out = json.loads(p.stdout.decode().strip().splitlines()[-1])
    check(out["error"] is None, "client: %s" % out["error"])
    want = expected()
    total = sum(len(v) for v in want.values())
    check(out["sent"] == total, "client sent %d, want %d" % (out["sent"], total))

    # stored: each partition read from its leader
    # the SDK sends a string body as a data section holding its JSON
    parts = {q: [json.loads(b) if isinstance(b, (bytes, memoryview)) else b for b in v]
             for q, v in read_partitions(brokers, etcd, HUB, "chk").items()}
    for q in range(NPARTS):
        check(parts[q] == want[q], "partition %d (leader node %d) holds %r, want %r"
              % (q, lead[q], parts[q][:12], want[q][:12]))
    log("stored: %r" % {q: len(v) for q, v in parts.items()})

    # management through node 1
    check(out["hub"]["partitionIds"] == [str(q) for q in range(NPARTS)], "hub %r" % out["hub"])
    for q in range(NPARTS):
        pp = out["parts"][str(q)]
        n = len(want[q])
        check(pp["partitionId"] == str(q) and pp["beginningSequenceNumber"] == 0 and
              pp["lastEnqueuedSequenceNumber"] == n - 1 and pp["lastEnqueuedOffset"] == str(n - 1) and
              pp["isEmpty"] is False,
              "partition %d properties on node 1 (leader %d): %r, want %d events" % (q, lead[q], pp, n))
    log("partition properties right on node 1 after %d ms" % out["parts_ms"])
    check(out["refused"] == "UnauthorizedError", "a wrong key on node 1: %r" % out["refused"])

    # consumed through node 2
    for q in range(NPARTS):
        evs = out["events"].get(str(q), [])
        check([e[2] for e in evs] == want[q], "partition %d read through node 2 (leader %d): %r, want %r"
              % (q, lead[q], [e[2] for e in evs][:12], want[q][:12]))
        check([e[0] for e in evs] == list(range(len(evs))), "partition %d sequence numbers %r"
              % (q, [e[0] for e in evs]))
        check([e[1] for e in evs] == [str(i) for i in range(len(evs))], "partition %d offsets %r"
              % (q, [e[1] for e in evs]))
        for e in evs:
            if e[2].startswith("key:"):
                check(e[3] == e[2].split(":")[1], "partition key %r of %r" % (e[3], e[2]))
                check(e[4] == "key-%s-%s" % tuple(e[2].split(":")[1:]), "message id %r of %r" % (e[4], e[2]))
    log("%d events in %d batches through node 1, read once each through node 2"
        % (total, NPARTS + 1 + NKEYS + 1))

    # mqd:batch is honoured only from another node
    q = 0
    addr = "%s/Partitions/%d" % (HUB, q)
    s = Sender(brokers[lead[q]].url, addr, 3, "plain", props={"mqd:batch": True})
    mqdtest.run_container(s, 60)
    check(s.link_cond is None and s.accepted == 3 and not s.rejected,
          "a client's sender with mqd:batch: %s, %r %r" % (s.status(), s.link_cond, s.rejected[:2]))
    r = mqdtest.Receiver(brokers[lead[q]].url, "%s/ConsumerGroups/chk2/Partitions/%d" % (HUB, q), idle=2.0 * SLOW)
    mqdtest.run_container(r, 60)
    got = [m.body for m in r.got]
    check(got[len(want[q]):] == ["plain-0", "plain-1", "plain-2"],
          "after a client's mqd:batch sender, partition %d ends with %r" % (q, got[len(want[q]):]))


if __name__ == "__main__":
    mqdtest.main(body, timeout=400)
