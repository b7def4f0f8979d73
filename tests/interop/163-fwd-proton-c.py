#!/usr/bin/python3
"""Proton's C examples through nodes that do not lead the partitions (issue 33, src/fwd):
send.c and receive.c as Debian ships them (libqpid-proton11-dev-examples,
/usr/share/proton/examples/c), built unmodified, SASL ANONYMOUS (allowed on the topic). A
real etcd and three nodes (mqdfwd.py), topic orders.c with 6 partitions and
replication_factor 3 led by all three nodes.
- send on node 1 to orders.c (the whole topic: round robin over the partitions, most led
  elsewhere): 400 messages ({"sequence": 1..400}, message-id 1..400), all acknowledged;
- send on node 2 to orders.c/Partitions/P, P a partition node 2 does not lead: 50, all
  acknowledged;
- each partition read from its leader: 350 in all, partition P holds the 50 of node 2's
  sender, and the bodies are each sequence of 1..400 once plus 1..50 once more (no dedup
  window: both senders number their message-ids from 1);
- receive on node 1 from orders.c/ConsumerGroups/g/Partitions/P (proxied to P's leader,
  node 1 not leading it either when possible): exactly what P holds, in its order;
- receive on node 3 from orders.c (the $shared queue, served over every leader): all 350
  messages, the same multiset of sequences."""

import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdfwd import NPARTS, cluster_with_topic, read_partitions  # noqa: E402
from mqdtest import SLOW, check, log, skip  # noqa: E402

EXAMPLES = "/usr/share/proton/examples/c"
T = "orders.c"
N1, N2 = 400, 50


def build(t, name):
    src = os.path.join(EXAMPLES, name + ".c")
    out = os.path.join(t.tmpdir, name)
    p = subprocess.run(["gcc", "-O1", "-o", out, src, "-lqpid-proton"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120 * SLOW)
    check(p.returncode == 0, "building %s: %s" % (src, p.stderr.decode()[-800:]))
    return out


def run(cmd, timeout):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    out, err = p.stdout.decode(), p.stderr.decode()
    log("%s: rc %d, stdout %s, stderr %s" % (" ".join(cmd[1:]), p.returncode,
                                            out.strip().splitlines()[-1:] if out.strip() else "-", err.strip()[-400:]))
    return p.returncode, out, err


def sequences(lines):
    seqs = []
    for ln in lines:
        m = re.fullmatch(r'\{"sequence"=(\d+)\}', ln.strip())
        if m:
            seqs.append(int(m.group(1)))
    return seqs


def body(t):
    if not os.path.exists(os.path.join(EXAMPLES, "send.c")):
        skip("Proton's C examples are not installed (Debian: libqpid-proton11-dev-examples)")
    if shutil.which("gcc") is None:
        skip("no gcc")
    send, receive = build(t, "send"), build(t, "receive")
    etcd, brokers, lead = cluster_with_topic(t, T, anonymous=T + "*", topic_extra=("dedup_window_ms=0",))
    port = {i: str(b.port) for i, b in brokers.items()}
    # a partition neither node 2 (its sender) nor node 1 (its receiver) leads
    ps = [q for q in range(NPARTS) if lead[q] == 3] or [q for q in range(NPARTS) if lead[q] != 2]
    P = ps[0]
    log("leaders %r; node 2 sends to partition %d (leader %d)" % (lead, P, lead[P]))

    rc, out, err = run([send, "127.0.0.1", port[1], T, str(N1)], 120 * SLOW)
    check(rc == 0 and "%d messages sent and acknowledged" % N1 in out,
          "send.c through node 1 to %s: rc %d, %s %s" % (T, rc, out[-300:], err[-300:]))
    rc, out, err = run([send, "127.0.0.1", port[2], "%s/Partitions/%d" % (T, P), str(N2)], 120 * SLOW)
    check(rc == 0 and "%d messages sent and acknowledged" % N2 in out,
          "send.c through node 2 to partition %d: rc %d, %s %s" % (P, rc, out[-300:], err[-300:]))

    parts = read_partitions(brokers, etcd, T, "chk")
    stored = {q: [dict(b)["sequence"] for b in v] for q, v in parts.items()}
    total = sum(len(v) for v in stored.values())
    check(total == N1 + N2, "%d messages stored, want %d: %r" % (total, N1 + N2, {q: len(v) for q, v in stored.items()}))
    want = sorted(list(range(1, N1 + 1)) + list(range(1, N2 + 1)))
    check(sorted(s for v in stored.values() for s in v) == want, "stored sequences are not 1..%d and 1..%d once each" % (N1, N2))
    check(len(stored[P]) >= N2, "partition %d holds %d, want at least node 2's %d" % (P, len(stored[P]), N2))
    per_part = {q: len(v) for q, v in stored.items()}
    check(sum(1 for q in range(NPARTS) if per_part[q] > 0) == NPARTS,
          "the round robin did not reach every partition: %r" % per_part)

    addr = "%s/ConsumerGroups/g/Partitions/%d" % (T, P)
    rc, out, err = run([receive, "127.0.0.1", port[1], addr, str(len(stored[P]))], 120 * SLOW)
    got = sequences(out.splitlines())
    check(rc == 0 and got == stored[P], "receive.c through node 1 from %s (leader %d): rc %d, %d messages %r, want %r"
          % (addr, lead[P], rc, len(got), got[:10], stored[P][:10]))

    rc, out, err = run([receive, "127.0.0.1", port[3], T, str(N1 + N2)], 120 * SLOW)
    got = sequences(out.splitlines())
    check(rc == 0 and "%d messages received" % (N1 + N2) in out and sorted(got) == want,
          "receive.c through node 3 from %s: rc %d, %d messages (%d distinct)" % (T, rc, len(got), len(set(got))))
    log("C examples: %d + %d sends through nodes 1 and 2 (per partition %r), %d + %d received through nodes 1 and 3"
        % (N1, N2, per_part, len(stored[P]), len(got)))


if __name__ == "__main__":
    mqdtest.main(body, timeout=400)
