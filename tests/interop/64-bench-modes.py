#!/usr/bin/python3
"""mqd-bench counts what the broker stored: send, both and txn modes (with transactional
sends) against mqd, each checked with an independent client (python3-qpid-proton).

  send   2,000 durable messages: RESULT msgs=2000, and a receiver then gets 2,000
         messages carrying mqd-bench's body magic.
  both   2,000 messages sent and received in one run: RESULT msgs=2000, nothing stale.
  txn    40 transactions x 7 transactional sends on 3 connections: RESULT msgs=280
         txns=40, and a receiver gets exactly 280 messages (all committed, none twice).
  txn    --txn-msgs 0: 25 empty transactions (declare -> discharge), nothing stored.
The broker's /metrics then counts 65 transactions declared and 65 committed.
"""

import os
import re
import subprocess
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import check, log, skip  # noqa: E402


def result(out):
    for line in out.splitlines():
        if line.startswith("RESULT "):
            return dict(kv.split("=", 1) for kv in line.split()[1:])
    return None


def bench(b, *args):
    exe = os.path.join(os.path.dirname(mqdtest.mqd_bin()), "mqd-bench")
    if not os.access(exe, os.X_OK):
        skip("no mqd-bench next to the broker binary (%s)" % exe)
    argv = [exe] + list(args) + ["--url", b.url, "--quiet", "--duration-cap", "60",
                                  "--broker-pid", str(b.pid)]
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120 * mqdtest.SLOW)
    r = result(p.stdout.decode())
    check(r is not None, "%s: no RESULT line:\n%s" % (" ".join(args), p.stdout.decode()))
    log("%s -> exit %d, %s msgs, %s msgs/s" % (" ".join(args[:1]), p.returncode, r.get("msgs"), r.get("msgs_per_s")))
    check(p.returncode == 0 and r.get("complete") == "1" and r.get("failed") == "0",
          "%s: exit %d, %s" % (" ".join(args), p.returncode, p.stdout.decode()))
    return r


def stored(b, topic, expect):
    r = mqdtest.receive(b.url, topic, count=expect, linger=1.0, timeout=60)
    bodies = [m.body for m in r.got]
    check(len(bodies) == expect, "%s: %d messages stored, expected %d" % (topic, len(bodies), expect))
    bad = [x for x in bodies if not bytes(x).startswith(b"MQDBENCH")]
    check(not bad, "%s: %d messages without mqd-bench's body" % (topic, len(bad)))
    # one run id, and every send timestamp distinct: no message stored twice
    stamps = {bytes(x)[16:24] for x in bodies}
    check(len(stamps) == expect, "%s: %d distinct messages of %d" % (topic, len(stamps), expect))


def txn_counts(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        text = r.read().decode()
    return {m.group(1): int(float(m.group(2))) for m in
            re.finditer(r'^mqd_transactions_total\{outcome="(\w+)"\} (\S+)$', text, re.M)}


def body(t):
    mport = mqdtest.free_port()
    b = t.broker(sets={"metrics_listen": "127.0.0.1:%d" % mport})

    r = bench(b, "send", "--address", "bs", "--count", "2000", "--size", "256", "--durable")
    check(r["msgs"] == "2000", "send: msgs=%s" % r["msgs"])
    stored(b, "bs", 2000)

    r = bench(b, "both", "--address", "bb", "--count", "2000", "--size", "256")
    check(r["msgs"] == "2000" and r["stale"] == "0", "both: msgs=%s stale=%s" % (r["msgs"], r["stale"]))

    r = bench(b, "txn", "--address", "bt", "--count", "40", "--txn-msgs", "7", "--connections", "3",
              "--size", "128", "--durable")
    check(r["msgs"] == "280" and r["txns"] == "40" and r["txn_msgs"] == "7",
          "txn: msgs=%s txns=%s" % (r["msgs"], r.get("txns")))
    stored(b, "bt", 280)

    r = bench(b, "txn", "--address", "be", "--count", "25")
    check(r["msgs"] == "25" and "txns" not in r, "empty txns: %s" % r)

    n = txn_counts(mport)
    log("broker counted transactions: %s" % n)
    check(n.get("declared") == 65 and n.get("committed") == 65 and n.get("aborted") == 0,
          "broker's transaction counters: %s" % n)


mqdtest.main(body, timeout=180)
