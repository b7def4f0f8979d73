#!/usr/bin/python3
"""AMQP 1.0 local transactions through python3-qpid-proton's transaction API
(Container.declare_transaction, Transaction.send / accept / commit / abort, as in
Proton's tx_send.py / tx_recv.py examples).

Every "nothing visible" check is paired with a non-transactional marker sent to the same
partition afterwards: a still-open transaction would hold the marker back too (readers
stop at the last stable offset), so seeing the marker proves the transaction is over.

  commit          10 transactional sends, each settled with transactional-state(accepted);
                  after commit a browser and a shared receiver see exactly those 10.
  rollback        10 sends, abort: only the marker is ever visible.
  open txn        while the transaction is open a browser sees nothing of it, nor a
                  later non-transactional message of that partition (LSO); after commit
                  all of them, in offset order.
  recv shared     transactional accepts on T: abort -> the same messages again; commit
                  -> gone (a later receiver gets only the rest).
  recv group      the same on T/ConsumerGroups/g, plus the group's committed offset.
  unknown id      a raw discharge (body built with proton.Described) of an id never
                  declared, and a second discharge of a committed id -> rejected with
                  amqp:transaction:unknown-id.
  close link      closing the coordinator link with an open transaction rolls it back.
  close conn      closing the connection with an open transaction rolls it back.
  dedup           topic dedup_window_ms=60000: a message-id sent twice is stored once.
  capabilities    the coordinator target offers amqp:local-transactions.
  delete          mqctl topic delete is refused (409) while an unfinished transaction
                  wrote to the topic, also after its producer link closed; then allowed.
  timeout         (MQD_TXN_TIMEOUT=1 only, ~65 s) a transaction left open past 60 s is
                  rolled back and its discharge rejected with amqp:transaction:timeout.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import (BlockingTxns, Client, Collect, check, log, receive, run_container,  # noqa: E402
                     send, txn_outcome_ok)

from proton import Delivery, Described, Message, symbol  # noqa: E402
from proton.handlers import TransactionHandler  # noqa: E402
from proton.reactor import Copy  # noqa: E402
from proton.utils import BlockingConnection  # noqa: E402
from proton import Timeout  # noqa: E402

DEDUP = "tx-dedup"


class TxnSender(Client, TransactionHandler):
    """Declares a transaction, sends `bodies` to `address` under it, waits until the
    broker settled every transfer, then ends with `end`: 'commit', 'abort',
    'close-link' (detach the coordinator link, then close the connection) or
    'close-conn'."""

    def __init__(self, url, address, bodies, end):
        super().__init__()
        self.url, self.address, self.bodies, self.end = url, address, list(bodies), end
        self.txn = None
        self.tid = None
        self.dlv = []
        self.outcomes = {}  # index -> (remote_state, remote data)
        self.result = None
        self.ended = False

    def on_start(self, event):
        self.conn = self.connect(event.container, self.url)
        self.sender = event.container.create_sender(self.conn, self.address)
        event.container.declare_transaction(self.conn, handler=self)

    def on_transaction_declared(self, event):
        self.txn = event.transaction
        self.tid = self.txn.id
        log("%s: declared %r" % (self.address, self.tid))
        for i, b in enumerate(self.bodies):
            self.dlv.append(self.txn.send(self.sender, Message(body=b)))

    def on_transaction_declare_failed(self, event):
        self.fail("declare failed: %s %s" % (event.delivery.remote_state, event.delivery.remote.condition))

    def on_delivery(self, event):
        d = event.delivery
        if d.link.is_sender and d.link.name == self.sender.name and d.updated:
            for i, x in enumerate(self.dlv):
                if x == d and i not in self.outcomes:
                    self.outcomes[i] = (d.remote_state, d.remote.data, d.remote.condition)
            if len(self.outcomes) == len(self.bodies) and not self.ended:
                self.ended = True
                self.finish_txn()

    def finish_txn(self):
        if self.end == "commit":
            self.txn.commit()
        elif self.end == "abort":
            self.txn.abort()
        elif self.end == "close-link":
            self.conn._txn_ctrl.close()
        elif self.end == "close-conn":
            self.result = "closed"
            self.finish()
        else:
            raise ValueError(self.end)

    def on_link_closed(self, event):
        if self.end == "close-link" and event.link.name == "txn-ctrl":
            self.result = "link-closed"
            self.finish()

    def on_transaction_committed(self, event):
        self.result = "committed"
        self.finish()

    def on_transaction_aborted(self, event):
        self.result = "aborted"
        self.finish()

    def on_transaction_commit_failed(self, event):
        self.result = "commit-failed: %s" % (event.delivery.remote.condition,)
        self.finish()

    def status(self):
        return "tid %r, %d of %d sends settled, result %s" % (self.tid, len(self.outcomes), len(self.bodies),
                                                             self.result)


class TxnReceiver(Client, TransactionHandler):
    """Declares a transaction, takes `n` messages from `address` accepting each under it
    (Transaction.accept), then commits or aborts."""

    def __init__(self, url, address, n, commit):
        super().__init__(prefetch=0, auto_accept=False)
        self.url, self.address, self.n, self.commit = url, address, n, commit
        self.got = []
        self.result = None

    def on_start(self, event):
        self.conn = self.connect(event.container, self.url)
        self.receiver = event.container.create_receiver(self.conn, self.address)
        event.container.declare_transaction(self.conn, handler=self)

    def on_transaction_declared(self, event):
        self.txn = event.transaction
        self.receiver.flow(self.n)

    def on_transaction_declare_failed(self, event):
        self.fail("declare failed: %s" % (event.delivery.remote.condition,))

    def on_message(self, event):
        self.got.append(event.message.body)
        self.txn.accept(event.delivery)
        if len(self.got) == self.n:
            self.txn.commit() if self.commit else self.txn.abort()
        elif len(self.got) > self.n:
            self.fail("more than %d messages on %d credit" % (self.n, self.n))

    def on_transaction_committed(self, event):
        self.result = "committed"
        self.finish()

    def on_transaction_aborted(self, event):
        self.result = "aborted"
        self.finish()

    def on_transaction_commit_failed(self, event):
        self.result = "commit-failed: %s" % (event.delivery.remote.condition,)
        self.finish()

    def status(self):
        return "got %s, result %s" % (self.got, self.result)


class RawDischarge(Client):
    """Attaches a coordinator link by hand and sends discharge(txn-id=tid, fail) with a
    body built from proton.Described; records the outcome."""

    def __init__(self, url, tid, fail):
        super().__init__()
        self.url, self.tid, self.fail_flag = url, tid, fail
        self.sent = False
        self.state = self.cond = None

    def on_start(self, event):
        conn = self.connect(event.container, self.url)
        self.link = event.container.create_sender(conn, None, name="raw-coord",
                                                  options=mqdtest.CoordinatorTarget())

    def on_sendable(self, event):
        if not self.sent and event.link.name == "raw-coord":
            self.sent = True
            body = Described(symbol("amqp:discharge:list"), [self.tid, self.fail_flag])
            self.d = event.link.send(Message(body=body))

    def on_delivery(self, event):
        d = event.delivery
        if d.link.is_sender and d.updated and self.state is None:
            self.state, self.cond = d.remote_state, d.remote.condition
            d.settle()
            self.finish()

    def status(self):
        return "sent %s, outcome %s" % (self.sent, self.state)


def browse(url, address, idle=2.0):
    return receive(url, address, idle=idle, timeout=60, options=Copy()).bodies()


def drain(url, address, idle=2.0):
    return receive(url, address, idle=idle, timeout=60).bodies()


def run_sender(url, address, bodies, end):
    h = TxnSender(url, address, bodies, end)
    run_container(h, 60)
    check(len(h.outcomes) == len(bodies), "%s: %d of %d transactional sends settled" %
          (address, len(h.outcomes), len(bodies)))
    bad = [(i, o) for i, o in sorted(h.outcomes.items()) if not txn_outcome_ok(o[0], o[1], h.tid)]
    check(not bad, "%s: transactional sends not settled with transactional-state(%r, accepted): %s"
          % (address, h.tid, bad[:3]))
    return h


def case_commit(url):
    T = "tx-commit"
    bodies = ["c-%02d" % i for i in range(10)]
    h = run_sender(url, T, bodies, "commit")
    check(h.result == "committed", "result %s, want committed" % h.result)
    got = browse(url, T)
    check(got == bodies, "browser after commit got %s, want %s" % (got, bodies))
    got = drain(url, T)
    check(got == bodies, "shared receiver after commit got %s, want %s" % (got, bodies))


def marker_only(url, T, what):
    send(url, T, [Message(body="marker")])
    got = browse(url, T, idle=2.5)
    check(got == ["marker"], "%s: browser got %s, want only the later marker (transaction rolled back)"
          % (what, got))
    got = drain(url, T)
    check(got == ["marker"], "%s: shared receiver got %s, want only the marker" % (what, got))


def case_rollback(url):
    T = "tx-abort"
    h = run_sender(url, T, ["a-%02d" % i for i in range(10)], "abort")
    check(h.result == "aborted", "result %s, want aborted" % h.result)
    marker_only(url, T, "after abort")


def case_open(url):
    T = "tx-open"
    c = BlockingConnection(url, timeout=30)
    try:
        bt = BlockingTxns(c)
        caps = [str(x) for x in (mqdtest.data_to_py(bt.coord.link.remote_target.capabilities) or [])]
        log("coordinator target capabilities: %s" % caps)
        check("amqp:local-transactions" in caps, "coordinator capabilities %s lack amqp:local-transactions" % caps)
        s = c.create_sender(T)
        tid = bt.declare()
        ds = [bt.send(s, Message(body="o-%d" % i), tid) for i in range(5)]
        res = bt.wait_settled(ds)
        check(all(txn_outcome_ok(r[0], r[1], tid) for r in res), "send outcomes %s" % res[:2])
        send(url, T, [Message(body="after")])  # non-transactional, behind the open txn
        got = browse(url, T, idle=2.0)
        check(got == [], "browser saw %s while the transaction was open (want nothing: "
              "uncommitted, and 'after' is beyond the last stable offset)" % got)
        ok, st, cond = bt.discharge(tid, False)
        check(ok, "commit: outcome %s %s" % (st, cond))
        want = ["o-%d" % i for i in range(5)] + ["after"]
        got = browse(url, T)
        check(got == want, "browser after commit got %s, want %s" % (got, want))
        # discharging it again: no longer a known transaction
        ok, st, cond = bt.discharge(tid, False)
        check(not ok and st == Delivery.REJECTED and cond is not None
              and cond.name == "amqp:transaction:unknown-id",
              "second discharge of %r: outcome %s %s, want rejected amqp:transaction:unknown-id"
              % (tid, st, cond))
    finally:
        c.close()


def txn_sends(c, T, bodies):
    """Declares a transaction on c and sends bodies to T in it (each settled): (txns,
    sender, txn id, outcomes)."""
    bt = BlockingTxns(c)
    s = c.create_sender(T)
    tid = bt.declare()
    res = bt.wait_settled([bt.send(s, Message(body=b), tid) for b in bodies])
    check(all(txn_outcome_ok(r[0], r[1], tid) for r in res), "send outcomes %s" % res[:2])
    return bt, s, tid, res


def case_delete_refused(url):
    """A topic an unfinished transaction wrote to cannot be deleted, even once the
    producer link is gone (the transaction still points at it); after the commit it can."""
    T = "tx-del"
    if not mqdtest.mqctl_bin():
        log("mqctl not built: case skipped")
        return
    c = BlockingConnection(url, timeout=30)
    try:
        bt, s, tid, _ = txn_sends(c, T, ["d"])
        s.close()
        rc, out, err = mqdtest.mqctl(url, "topic", "delete", T)
        check(rc != 0 and "1 unfinished transactions" in err,
              "delete of %s with an open transaction: exit %d %r %r" % (T, rc, out, err))
        ok, st, cond = bt.discharge(tid, False)
        check(ok, "commit: outcome %s %s" % (st, cond))
        rc, out, err = mqdtest.mqctl(url, "topic", "delete", T)
        check(rc == 0, "delete after the commit: exit %d %r %r" % (rc, out, err))
    finally:
        c.close()


def case_recv(url, T, addr, data_dir=None, topic=None):
    send(url, T, [Message(body="r%d" % i) for i in range(6)])
    h = TxnReceiver(url, addr, 3, commit=False)
    run_container(h, 60)
    check(h.result == "aborted" and h.got == ["r0", "r1", "r2"],
          "aborting receiver: %s" % h.status())
    h = TxnReceiver(url, addr, 3, commit=True)
    run_container(h, 60)
    check(h.result == "committed", "committing receiver: %s" % h.status())
    check(h.got == ["r0", "r1", "r2"], "after the abort, the next transaction got %s, want r0..r2 "
          "delivered again" % h.got)
    if data_dir is not None:
        deadline = time.monotonic() + 5
        offs = None
        while time.monotonic() < deadline:
            offs = mqdtest.group_offsets(data_dir, topic, "g")
            if offs and offs.get(0) == 3:
                break
            time.sleep(0.1)
        check(offs and offs.get(0) == 3, "group g committed offsets %s after the commit, want {0: 3}" % offs)
    got = drain(url, addr)
    check(got == ["r3", "r4", "r5"], "after the commit a receiver got %s, want r3..r5 only" % got)


def case_unknown(url):
    # well-formed txn-ids (binary, at most 32 octets) that were never declared
    bad = []
    for tid in (b"\x00\x00\x00\x00\x7f\xff\xff\xf0", b"\xff" * 8, b"nope", b"no-such-txn",
                b"t" * 32):
        h = RawDischarge(url, tid, False)
        run_container(h, 30)
        log("raw discharge of %r: %s %s" % (tid, h.state, h.cond))
        if h.state != Delivery.REJECTED or h.cond is None or h.cond.name != "amqp:transaction:unknown-id":
            bad.append("%r -> %s %s" % (tid, h.state, h.cond))
    check(not bad, "discharge of an unknown id, want rejected amqp:transaction:unknown-id: %s" % "; ".join(bad))


def case_close_link(url):
    T = "tx-close-link"
    h = run_sender(url, T, ["l-%d" % i for i in range(5)], "close-link")
    check(h.result == "link-closed", "result %s" % h.result)
    marker_only(url, T, "after the coordinator link closed")


def case_close_conn(url):
    T = "tx-close-conn"
    h = run_sender(url, T, ["k-%d" % i for i in range(5)], "close-conn")
    marker_only(url, T, "after the connection closed")


def case_dedup(url):
    for T, want in ((DEDUP, ["d1", "d2", "d3"]), ("tx-nodedup", ["d1", "d2", "d1-again", "d3"])):
        send(url, T, [Message(id="id-1", body="d1"), Message(id="id-2", body="d2")])
        send(url, T, [Message(id="id-1", body="d1-again")])  # the resend: accepted, not stored
        send(url, T, [Message(id="id-3", body="d3")])
        got = drain(url, T)
        check(got == want, "%s: received %s, want %s" % (T, got, want))


def case_timeout(url):
    T = "tx-timeout"
    c = BlockingConnection(url, timeout=30)
    try:
        bt, s, tid, _ = txn_sends(c, T, ["t-%d" % i for i in range(3)])
        log("waiting 66 s for the transaction timeout")
        try:
            c.wait(lambda: False, timeout=66, msg="idle")  # keeps the connection serviced
        except Timeout:
            pass
        ok, st, cond = bt.discharge(tid, False)
        check(not ok and st == Delivery.REJECTED and cond is not None and cond.name == "amqp:transaction:timeout",
              "discharge after the timeout: %s %s, want rejected amqp:transaction:timeout" % (st, cond))
    finally:
        c.close()
    marker_only(url, T, "after the timeout")


def body(t):
    b = t.broker(sets={"topic.%s.dedup_window_ms" % DEDUP: 60000})
    url = b.url
    coll = Collect()
    with coll.case("commit -> exactly N visible"):
        case_commit(url)
    with coll.case("rollback -> none"):
        case_rollback(url)
    with coll.case("open transaction invisible, LSO holds later messages"):
        case_open(url)
    with coll.case("transactional receive, shared T"):
        case_recv(url, "tx-recv", "tx-recv")
    with coll.case("transactional receive, group T/ConsumerGroups/g"):
        case_recv(url, "tx-grp", "tx-grp/ConsumerGroups/g", b.data_dir, "tx-grp")
    with coll.case("discharge of an unknown id"):
        case_unknown(url)
    with coll.case("coordinator link closed -> rollback"):
        case_close_link(url)
    with coll.case("connection closed -> rollback"):
        case_close_conn(url)
    with coll.case("duplicate detection"):
        case_dedup(url)
    with coll.case("topic with an unfinished transaction: delete refused"):
        case_delete_refused(url)
    if os.environ.get("MQD_TXN_TIMEOUT") == "1":
        with coll.case("transaction timeout"):
            case_timeout(url)
    b.check_alive("after the cases")
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=int(os.environ.get("MQD_TXN_TIMEOUT") == "1") * 90 + 150)
