#!/usr/bin/python3
"""Throughput of transactional sends against the same messages sent without a
transaction (a measurement: only delivery is asserted).

  txn     for ~MQD_TXN_SECS seconds (default 10): declare, 10 durable 1 KiB messages as
          transactional transfers (pipelined), wait for their transactional-state
          settlements, commit. One connection, one producer.
  plain   the same number of the same messages, durable, unsettled, pipelined over
          link credit (mqdtest.send), each settled with accepted.

Prints transactions/s, messages/s of both, and the ratio. Then a receiver on each topic
must get every message exactly once.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import BlockingTxns, check, log, txn_outcome_ok  # noqa: E402

from proton import Message  # noqa: E402
from proton.utils import BlockingConnection  # noqa: E402

SECS = float(os.environ.get("MQD_TXN_SECS", "10"))
PER_TXN = 10
PAYLOAD = b"x" * 1024


def msg(topic, i):
    return Message(id="%s-%d" % (topic, i), body=PAYLOAD, durable=True, properties={"i": i})


def body(t):
    b = t.broker()
    TT, TP = "tput-txn", "tput-plain"
    c = BlockingConnection(b.url, timeout=30)
    bt = BlockingTxns(c)
    s = c.create_sender(TT)
    n = 0
    ntx = 0
    t0 = time.monotonic()
    while time.monotonic() - t0 < SECS:
        tid = bt.declare()
        ds = [bt.send(s, msg(TT, n + j), tid) for j in range(PER_TXN)]
        res = bt.wait_settled(ds)
        check(all(txn_outcome_ok(r[0], r[1], tid) for r in res), "txn %d: send outcomes %s" % (ntx, res[:2]))
        ok, st, cond = bt.discharge(tid, False)
        check(ok, "txn %d: commit -> %s %s" % (ntx, st, cond))
        n += PER_TXN
        ntx += 1
    t_txn = time.monotonic() - t0
    c.close()
    log("transactional: %d txns x %d msgs (1 KiB, durable) in %.2fs: %.1f txn/s, %.0f msg/s"
        % (ntx, PER_TXN, t_txn, ntx / t_txn, n / t_txn))

    t0 = time.monotonic()
    mqdtest.send(b.url, TP, [msg(TP, i) for i in range(n)], timeout=120)
    t_plain = time.monotonic() - t0
    log("non-transactional: %d msgs (1 KiB, durable, pipelined) in %.2fs: %.0f msg/s"
        % (n, t_plain, n / t_plain))

    # the same messages, non-transactional, but one batch of 10 at a time (wait for the
    # 10 settlements before sending the next 10), the closest analogue of a transaction
    TB = "tput-batch"
    c = BlockingConnection(b.url, timeout=30)
    s = c.create_sender(TB)
    t0 = time.monotonic()
    for k in range(0, n, PER_TXN):
        ds = [s.link.send(msg(TB, k + j)) for j in range(PER_TXN)]
        c.wait(lambda: all(d.remote_state for d in ds), timeout=30, msg="batch settlements")
        check(all(d.remote_state == d.ACCEPTED for d in ds), "batch %d: %s" % (k, [d.remote_state for d in ds]))
        for d in ds:
            d.settle()
    t_batch = time.monotonic() - t0
    c.close()
    log("non-transactional in batches of %d (wait for each batch): %.2fs: %.1f batch/s, %.0f msg/s"
        % (PER_TXN, t_batch, n / PER_TXN / t_batch, n / t_batch))

    for topic in (TT, TP, TB):
        r = mqdtest.receive(b.url, topic, count=n, linger=1.0, timeout=120)
        ids = [m.id for m in r.got]
        check(len(ids) == n and sorted(ids) == sorted("%s-%d" % (topic, i) for i in range(n)),
              "%s: received %d messages (%d distinct), want %d" % (topic, len(ids), len(set(ids)), n))
        check(all(m.body == PAYLOAD for m in r.got), "%s: payload changed" % topic)
    log("RESULT: %d msgs each; transactional %.1f txn/s (%.0f msg/s); non-transactional pipelined %.0f msg/s "
        "(%.1fx the transactional rate); non-transactional batches of 10 %.1f batch/s (%.1fx)"
        % (n, ntx / t_txn, n / t_txn, n / t_plain, t_txn / t_plain, n / PER_TXN / t_batch, t_txn / t_batch))


if __name__ == "__main__":
    mqdtest.main(body, timeout=150)
