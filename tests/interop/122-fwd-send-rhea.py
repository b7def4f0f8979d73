#!/usr/bin/python3
"""rhea through a node that does not lead the partitions (issue 33, src/fwd): a real etcd
and three nodes (mqdfwd.py), topic orders.r with 6 partitions and replication_factor 3
led by all three nodes; an unmodified rhea client (fwd-rhea-client.js, SASL PLAIN as
admin) connected to node 1 only sends 1,200 keyed messages (40 keys) to orders.r: all
accepted, no link error; each partition read from its leader holds exactly the messages
whose key murmur2 sends there (1,200 in all, counts per partition as computed from the
keys, each once, each key's in send order)."""

import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdfwd import NPARTS, PW, check_keyed, cluster_with_topic, read_partitions  # noqa: E402
from mqdtest import SLOW, check, log, skip  # noqa: E402

N = 1200
NKEYS = 40
T = "orders.r"


def body(t):
    if shutil.which("node") is None:
        skip("node is not on PATH")
    etcd, brokers, lead = cluster_with_topic(t, T)
    client = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fwd-rhea-client.js")
    p = subprocess.run(["node", client, str(brokers[1].port), PW["admin"], T, str(N), str(NKEYS)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=180 * SLOW)
    if p.returncode == 77:
        skip("rhea not installed (cd tests/interop/node && npm ci)")
    log("rhea: %s %s" % (p.stdout.decode().strip(), p.stderr.decode().strip()[-500:]))
    out = json.loads(p.stdout.decode().strip().splitlines()[-1])
    check(out["error"] is None, "rhea sender: %s" % out["error"])
    check(out["accepted"] == N and not out["rejected"],
          "rhea: %d accepted, rejected %r" % (out["accepted"], out["rejected"][:3]))
    parts = read_partitions(brokers, etcd, T, "chk")
    want = {p: 0 for p in range(NPARTS)}
    for i in range(N):
        want[mqdtest.kafka_partition("k%d" % (i % NKEYS), NPARTS)] += 1
    got = {p: len(v) for p, v in parts.items()}
    check(got == want, "messages per partition %r, want %r" % (got, want))
    check_keyed(parts, "r", N, NKEYS)
    log("%d rhea sends through node 1 accepted, per partition %r" % (N, got))


if __name__ == "__main__":
    mqdtest.main(body, timeout=300)
