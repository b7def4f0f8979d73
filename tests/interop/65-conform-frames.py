#!/usr/bin/python3
"""AMQP 1.0 conformance, part 2 (transport), with raw frames (issue 17 point 4; the table
is docs/conformance.md). A Proton engine on our own socket does SASL, open, begin and the
plain attaches (52-hostile-frames.py's raw client); the frames under test are written by
hand, and what mqd stored is read back with Proton's BlockingConnection.

(a) 2.6.12 / 2.7.5 `more`: two multi-frame deliveries on two links of one session, their
    frames interleaved (a1 b1 a2 b2 a3), each reassembled whole on its own topic: one
    message each, exact bodies (the old mqd died of SIGSEGV: a stale delivery event made
    it reject and settle a send still waiting for its record to be stable).
(b) 2.7.5 `aborted`: on a link with link_credit 4, six deliveries of which each is a
    first frame (more=true) and an abort, then one whole message: nothing of the aborted
    ones is stored (the topic holds 1 message, the whole one), the link stays attached,
    mqd's only disposition is for the whole one (delivery-id 6), and each delivery, sent
    only once credit is there for it, finds credit within 5 s (an
    aborted delivery still takes credit, so the broker must give it back; mqd now does so
    at once, the old one on its periodic producer refill).
(c) 2.6.13 resume: an attach carrying a non-empty unsettled map, and one with
    incomplete-unsettled=true, are refused: attach answered, then detached with
    amqp:not-implemented (Proton 0.37 ignores both fields; the old mqd attached them as
    fresh links, dropping the peer's unsettled state); an empty map is an ordinary attach
    (active, credit granted).
(d) 2.6.7 drain: a receiver with credit 10 and drain=true on a queue of 3 gets the 3 in
    order, then mqd's flow: credit 0 and delivery-count advanced by the 7 unused
    (the receiver's `drained` = 7).
"""

import importlib.util
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import check, log, send  # noqa: E402

from proton import Endpoint, Message, Transport  # noqa: E402
from proton.utils import BlockingConnection  # noqa: E402

_here = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("hostile_frames", os.path.join(_here, "52-hostile-frames.py"))
hf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hf)
RawAmqp, frame, transfer, Ctl = hf.RawAmqp, hf.frame, hf.transfer, hf.Ctl


def drain_topic(url, topic, want, credit=50):
    """Every message of topic (queue mode), accepted; stops once `want` arrived and then
    1 s (scaled) passed without another."""
    from proton import Timeout
    conn = BlockingConnection(url, timeout=30 * mqdtest.SLOW)
    got = []
    try:
        rcv = conn.create_receiver(topic, credit=credit)
        while True:
            try:
                m = rcv.receive(timeout=(1.0 if len(got) >= want else 10.0) * mqdtest.SLOW)
            except Timeout:
                break
            got.append(m.body)
            rcv.accept()
    finally:
        conn.close()
    return got


def senders(b, topics):
    """A raw client with one sender per topic on one session (handles 0, 1, ... in order),
    pumped until each has credit."""
    r = RawAmqp(b.port)
    r.open()
    ssn = r.c.session()
    ssn.open()
    links = []
    for tp in topics:
        s = ssn.sender("c65-%s" % tp)
        s.target.address = tp
        s.open()
        links.append(s)
    check(r.pump(lambda: all(s.credit > 0 for s in links) or r.closed_by_peer),
          "no credit on %s" % topics)
    return r, links


def case_interleaved(b, ctl):
    ta, tb = "c65-ia", "c65-ib"
    ma = Message(body="A" * 300 + "-whole-a").encode()
    mb = Message(body="B" * 200 + "-whole-b").encode()
    r, (sa, sb) = senders(b, [ta, tb])
    a1, a2, a3 = ma[:100], ma[100:200], ma[200:]
    b1, b2 = mb[:90], mb[90:]
    r.send_raw(transfer(handle=0, delivery_id=0, tag=b"a", more=True, payload=a1) +
               transfer(handle=1, delivery_id=1, tag=b"b", more=True, payload=b1) +
               transfer(handle=0, tag=b"a", more=True, payload=a2) +
               transfer(handle=1, tag=b"b", more=False, payload=b2) +
               transfer(handle=0, tag=b"a", more=False, payload=a3))
    deadline = time.monotonic() + 10 * mqdtest.SLOW
    n = {}
    while time.monotonic() < deadline:
        n = ctl.messages_in()
        if n.get(ta) and n.get(tb):
            break
        r.pump(lambda: False, timeout=0.2)
    check(not r.closed_by_peer and not (sa.state | sb.state) & Endpoint.REMOTE_CLOSED,
          "interleaved: closed (%s) / detached (%s %s)" % (r.closed_by_peer, sa.remote_condition,
                                                           sb.remote_condition))
    r.sock.close()
    ga, gb = drain_topic(b.url, ta, 1), drain_topic(b.url, tb, 1)
    check(ga == ["A" * 300 + "-whole-a"],
          "interleaved: %s holds %d messages %r, want the one 3-frame message" % (ta, len(ga), [x[-12:] for x in ga]))
    check(gb == ["B" * 200 + "-whole-b"],
          "interleaved: %s holds %d messages %r, want the one 2-frame message" % (tb, len(gb), [x[-12:] for x in gb]))
    log("interleaved a1 b1 a2 b2 a3 on one session: messages_in %s=%d %s=%d; bodies exact (%d and %d chars)"
        % (ta, n.get(ta, 0), tb, n.get(tb, 0), len(ga[0]), len(gb[0])))


def case_aborted(b, ctl):
    """Like a well-behaved sender, each delivery waits for credit: the client engine sent
    none of them, so its `credit` reads as mqd's delivery-count + credit, and what is left
    for us is that minus what we sent."""
    tp = "c65-abort"
    r, (s,) = senders(b, [tp])
    credit0 = s.credit
    frames_in = []  # what mqd sends, as Proton's frame trace prints it
    r.t.tracer = lambda transport, line: frames_in.append(line) if "<-" in line else None
    r.t.trace(Transport.TRACE_FRM)
    sent = 0
    for i in range(7):
        ok = r.pump(lambda: s.credit - sent >= 1 or s.state & Endpoint.REMOTE_CLOSED or r.closed_by_peer,
                    timeout=5)
        cond = s.remote_condition
        check(ok and s.credit - sent >= 1,
              "aborted: after %d aborted deliveries on link credit %d, no credit for another "
              "(credit shown %d, detached: %s)" % (sent, credit0, s.credit - sent, cond and cond.name))
        if i < 6:
            r.send_raw(transfer(delivery_id=i, tag=b"x%d" % i, more=True,
                                payload=Message(body="lost-%d" % i).encode()[:7]) +
                       transfer(tag=b"x%d" % i, more=False, aborted=True, payload=b""))
        else:
            r.send_raw(transfer(delivery_id=6, tag=b"w", more=False,
                                payload=Message(body="after-the-aborts").encode()))
        sent += 1
    deadline = time.monotonic() + 10 * mqdtest.SLOW
    n = 0
    while time.monotonic() < deadline and not r.closed_by_peer and not s.state & Endpoint.REMOTE_CLOSED:
        n = ctl.messages_in().get(tp, 0)
        if n:
            break
        r.pump(lambda: s.state & Endpoint.REMOTE_CLOSED, timeout=0.2)
    cond = s.remote_condition
    check(not s.state & Endpoint.REMOTE_CLOSED and not r.closed_by_peer,
          "aborted: detached (%s) / closed (%s)" % (cond and cond.name, r.closed_by_peer))
    check(n == 1, "aborted: messages_in of %s is %d, want 1" % (tp, n))
    r.pump(lambda: any("@disposition" in x for x in frames_in), timeout=5)
    disp = [x for x in frames_in if "@disposition" in x]
    firsts = sorted(int(re.search(r"first=(0x[0-9a-f]+|\d+)", x).group(1), 0) for x in disp)
    check(firsts == [6], "aborted: dispositions from mqd for delivery-ids %s, want only 6 (the whole "
          "message; an aborted delivery is settled by its abort): %s" % (firsts, disp))
    r.sock.close()
    got = drain_topic(b.url, tp, 1)
    check(got == ["after-the-aborts"], "aborted: %s holds %r, want only 'after-the-aborts'" % (tp, got))
    log("6 aborted deliveries on link credit %d, each waiting for credit, then 1 whole: link "
        "attached, messages_in %d, topic holds %r, dispositions for delivery-ids %s" % (credit0, n, got, firsts))


def attach_frame(name, handle, address, unsettled=None, incomplete=None):
    """A sender attach (role=false) to `address` on channel 0; `unsettled` is the encoded
    map (bytes) or None, `incomplete` True/False/None."""
    def s8(b):
        return b"\xa1" + bytes([len(b)]) + b
    tgt_fields = s8(address.encode())
    target = b"\x00\x53\x29\xc0" + bytes([len(tgt_fields) + 1, 1]) + tgt_fields
    source = b"\x00\x53\x28\x45"
    f = [s8(name.encode()), b"\x52" + bytes([handle]), b"\x42", b"\x40", b"\x40", source, target,
         unsettled if unsettled is not None else b"\x40"]
    if incomplete is not None:
        f.append(b"\x41" if incomplete else b"\x42")
    body = b"".join(f)
    return frame(b"\x00\x53\x12\xc0" + bytes([len(body) + 1, len(f)]) + body)


def find_link(conn, name):
    lk = conn.link_head(0)
    while lk:
        if lk.name == name:
            return lk
        lk = lk.next(0)
    return None


def case_resume(b):
    one_entry = b"\xc1\x05\x02\xa0\x01t\x40"  # {binary "t": null}
    cases = [("c65-resume-map", one_entry, None, "amqp:not-implemented"),
             ("c65-resume-incomplete", None, True, "amqp:not-implemented"),
             ("c65-resume-empty", b"\xc1\x01\x00", False, None)]
    r = RawAmqp(b.port)
    r.open()
    ssn = r.c.session()
    ssn.open()
    check(r.pump(lambda: ssn.state & Endpoint.REMOTE_ACTIVE), "resume: no begin from mqd")
    results = {}
    for i, (name, um, inc, want) in enumerate(cases):
        r.send_raw(attach_frame(name, 9 + i, "c65-resume", unsettled=um, incomplete=inc))

        def answered():
            lk = find_link(r.c, name)
            return lk is not None and (lk.state & Endpoint.REMOTE_CLOSED or lk.credit > 0)
        check(r.pump(lambda: answered() or r.closed_by_peer, timeout=10),
              "resume %s: no attach answer (%s)" % (name, r.closed_by_peer))
        lk = find_link(r.c, name)
        cond = lk.remote_condition
        results[name] = (cond.name if cond else None, lk.credit)
        if want:
            check(lk.state & Endpoint.REMOTE_CLOSED and cond is not None and cond.name == want,
                  "resume %s: %s (%s), want detached with %s"
                  % (name, cond and cond.name, cond and cond.description, want))
            check(lk.remote_target.address is None,
                  "resume %s: refused, yet the attach named target %r" % (name, lk.remote_target.address))
        else:
            check(not lk.state & Endpoint.REMOTE_CLOSED and lk.credit > 0,
                  "resume %s (empty map): detached with %s, credit %d" % (name, cond, lk.credit))
    check(not r.closed_by_peer, "resume: connection closed (%s)" % r.closed_by_peer)
    r.sock.close()
    log("resume: (condition, credit) %s" % results)


def case_drain(b):
    tp = "c65-drain"
    send(b.url, tp, [Message(body="d-%d" % i) for i in range(3)])
    r = RawAmqp(b.port)
    r.open()
    ssn = r.c.session()
    ssn.open()
    rcv = ssn.receiver("c65-drainer")
    rcv.source.address = tp
    rcv.open()
    check(r.pump(lambda: rcv.state & Endpoint.REMOTE_ACTIVE), "drain: receiver not attached")
    rcv.drain(10)
    got = []

    def take():
        while rcv.current is not None and not rcv.current.partial:
            d = rcv.current
            m = Message()
            m.decode(rcv.recv(d.pending))
            got.append(m.body)
            rcv.advance()
            d.update(d.ACCEPTED)
            d.settle()
        return len(got) >= 3 and rcv.credit == 0
    ok = r.pump(take, timeout=15)
    drained = rcv.drained()
    check(ok, "drain: got %r, credit %d (want 3 messages and credit 0)" % (got, rcv.credit))
    check(got == ["d-0", "d-1", "d-2"], "drain: got %r" % got)
    check(drained == 7, "drain: the broker's flow advanced delivery-count by %d unused credits, want 7"
          % drained)
    r.sock.close()
    log("drain with credit 10 on 3 messages: got %r, then flow credit 0, drained %d" % (got, drained))


def body(t):
    b = t.broker(sets={"link_credit": "4"})
    ctl = Ctl(b.url)
    coll = mqdtest.Collect()
    with coll.case("(a) interleaved multi-frame deliveries on one session"):
        case_interleaved(b, ctl)
    with coll.case("(b) aborted deliveries store nothing and give credit back"):
        case_aborted(b, ctl)
    with coll.case("(c) resume (unsettled map on attach) refused"):
        case_resume(b)
    with coll.case("(d) drain"):
        case_drain(b)
    b.check_alive("after the cases")
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=240)
