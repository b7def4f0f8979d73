#!/usr/bin/python3
"""Transfers that Proton 0.37 asserts on instead of refusing (issue 16 point 1), sent as
raw frames over TCP after a real SASL ANONYMOUS + open + begin + attach, while a
well-behaved client on its own connection keeps sending and receiving throughout.

The frame of the issue, transfer{handle=0, delivery-id=null, delivery-tag="t",
message-format=0, settled=false, more=true} + one payload byte, made the old mqd die with
SIGABRT (transport.c pn_do_transfer: Assertion `id_present' failed). It is sent on
  (a) a plain sender link, (b) a link the ACL refused, (c) a `$management` link,
  (d) the anonymous relay (null target);
and further starts of a delivery without a delivery-id:
  (e) more=false (a whole message), (f) more=true with aborted=true (Proton asserts
      before it looks at aborted), (g) the first transfer after an aborted multi-frame
      delivery (Proton clears "more pending" on abort), (h) more=true on a handle no
      sender attached; (k) a sasl-init on an open connection (Proton re-runs the SASL
      callback: found by fuzz_conn as a leak).
Each time: the connection is closed with amqp:connection:framing-error in an AMQP close
frame, mqd's pid is alive, the bystander keeps making round trips, and no topic's
messages_in (mqctl topic list) moved. A positive control (i): a two-frame delivery whose
continuation omits the delivery-id (as the spec allows) is stored whole (1 message, its
exact body) and the connection stays open. (j) A sasl-init whose mechanism is not a symbol
(found by fuzz_conn; the old mqd died of SIGSEGV) gets a sasl-outcome, mqd stays up."""

import importlib.util
import json
import os
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import check, log  # noqa: E402

from proton import Endpoint, Message  # noqa: E402
from proton.utils import BlockingConnection  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "bad_input", os.path.join(os.path.dirname(os.path.abspath(__file__)), "10-bad-input.py"))
bad_input = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bad_input)
RawAmqp, Bystander, frame = bad_input.RawAmqp, bad_input.Bystander, bad_input.frame

FRAMING = "amqp:connection:framing-error"
SASL_INIT = b"\x00\x53\x41\xc0\x0c\x01\xa3\x09ANONYMOUS"
ACL = """[acl]
deny * send hf-denied
allow * send,receive,browse,manage,create *
"""


def transfer(handle=0, delivery_id=None, tag=b"t", more=True, aborted=None, payload=b"x"):
    """A transfer frame on channel 0: handle, delivery-id, tag, format 0, settled=false,
    more (and aborted when given), then the payload."""
    f = [b"\x52" + bytes([handle]), b"\x40" if delivery_id is None else b"\x52" + bytes([delivery_id]),
         b"\xa0" + bytes([len(tag)]) + tag, b"\x43", b"\x42", b"\x41" if more else b"\x42"]
    if aborted is not None:
        f += [b"\x40", b"\x40", b"\x40", b"\x41" if aborted else b"\x42"]
    body = b"".join(f)
    return frame(b"\x00\x53\x14\xc0" + bytes([len(body) + 1, len(f)]) + body + payload)


class Ctl:
    def __init__(self, url):
        self.url = url

    def messages_in(self):
        """{topic: messages_in} for every topic but the bystander's and mqctl's replies'."""
        rc, out, err = mqdtest.mqctl(self.url, "--json", "topic", "list")
        check(rc == 0, "mqctl topic list: exit %d: %s" % (rc, err))
        return {t["name"]: t["messages_in"] for t in json.loads(out)
                if t["name"] != "bystander" and not t["name"].startswith("$tmp")}


def attach(b, address, wait_for):
    """A raw client with one sender (channel 0, handle 0) on `address` (None: the relay),
    pumped until `wait_for` ("credit", "active" or "detached")."""
    r = RawAmqp(b.port)
    r.open()
    ssn = r.c.session()
    ssn.open()
    snd = ssn.sender("hf-%s" % (address or "relay"))
    snd.target.address = address
    snd.open()
    ok = {"credit": lambda: snd.credit > 0,
          "active": lambda: snd.state & Endpoint.REMOTE_ACTIVE,
          "detached": lambda: snd.state & Endpoint.REMOTE_CLOSED}[wait_for]
    check(r.pump(lambda: ok() or r.closed_by_peer), "%s: no %s after the attach" % (address, wait_for))
    check(not r.closed_by_peer, "%s: closed after the attach (%s)" % (address, r.closed_by_peer))
    return r, snd


def refused(b, ctl, by, what, address, wait_for, frames):
    before_in, before_rounds = ctl.messages_in(), by.rounds
    r, snd = attach(b, address, wait_for)
    r.send_raw(b"".join(frames))
    got_close, cond = r.expect_close(FRAMING, what)
    b.check_alive("after %s" % what)
    t0 = time.monotonic()
    while by.rounds <= before_rounds and by.error is None and time.monotonic() - t0 < 20 * mqdtest.SLOW:
        time.sleep(0.05)
    check(by.error is None and by.rounds > before_rounds,
          "%s: the bystander made no round trip afterwards (%s)" % (what, by.error))
    after_in = ctl.messages_in()
    moved = [k for k in set(before_in) | set(after_in) if after_in.get(k, 0) != before_in.get(k, 0)]
    check(not moved, "%s: topics' messages_in moved: %r -> %r" % (what, before_in, after_in))
    log("%s: close %s (%s); pid %d alive; bystander at %d rounds; messages_in unchanged %r"
        % (what, cond.name, cond.description, b.pid, by.rounds, after_in))


def case_sasl_mech_not_symbol(b, by):
    """A sasl-init whose mechanism is not a symbol (0xa2, no such type): Proton hands the
    broker's SASL callback a NULL mechanism (fuzz_conn found it: SIGSEGV in strcmp)."""
    rounds = by.rounds
    s = socket.create_connection(("127.0.0.1", b.port), timeout=5)
    s.sendall(b"AMQP\x03\x01\x00\x00" + frame(SASL_INIT.replace(b"\xa3", b"\xa2"), ftype=1))
    data, how = bad_input.read_until_closed(s)
    s.close()
    b.check_alive("after a sasl-init with a mechanism that is not a symbol")
    outcome = data.find(b"\x00\x53\x44")
    check(outcome >= 0, "sasl-init, mechanism not a symbol: no sasl-outcome in %r" % data[:80])
    code = data[outcome + 6:outcome + 8]  # 00 53 44 c0 size count 50 code
    check(code in (b"\x50\x01", b"\x50\x02"), "sasl-outcome code %r, want auth (1) or sys (2)" % code)
    t0 = time.monotonic()
    while by.rounds <= rounds and by.error is None and time.monotonic() - t0 < 20 * mqdtest.SLOW:
        time.sleep(0.05)
    check(by.rounds > rounds, "the bystander made no round trip afterwards (%s)" % by.error)
    log("sasl-init with mechanism 0xa2: sasl-outcome code %d, closed (%s); pid %d alive"
        % (code[1], how, b.pid))


def case_continuation_without_id(b, ctl):
    """Valid: the continuation of a delivery may omit its delivery-id."""
    body = b"\x00\x53\x77\xa1\x0bhello-split"
    r, snd = attach(b, "hf-split", "credit")
    r.send_raw(transfer(delivery_id=0, tag=b"s1", more=True, payload=body[:5]) +
               transfer(delivery_id=None, tag=b"s1", more=False, payload=body[5:]))
    t0 = time.monotonic()
    n = 0
    while time.monotonic() - t0 < 10 * mqdtest.SLOW:
        n = ctl.messages_in().get("hf-split", 0)
        if n:
            break
        r.pump(lambda: False, timeout=0.2)
    check(n == 1, "two-frame delivery, continuation without delivery-id: hf-split has %d messages, want 1" % n)
    check(not r.closed_by_peer and not r.c.state & Endpoint.REMOTE_CLOSED,
          "two-frame delivery: the connection was closed (%s %s)" % (r.closed_by_peer, r.c.remote_condition))
    r.sock.close()
    conn = BlockingConnection(b.url, timeout=20 * mqdtest.SLOW)
    try:
        rcv = conn.create_receiver("hf-split", credit=5)
        m = rcv.receive(timeout=10 * mqdtest.SLOW)
        rcv.accept()
    finally:
        conn.close()
    check(m.body == "hello-split", "two-frame delivery stored %r, want 'hello-split'" % m.body)
    log("continuation without delivery-id: 1 message stored, body %r, connection stayed open" % m.body)


def body(t):
    conf = os.path.join(t.tmpdir, "acl.conf")
    with open(conf, "w") as f:
        f.write(ACL)
    b = t.broker(conf=conf)
    ctl = Ctl(b.url)
    by = Bystander(b.url)
    by.start()
    t0 = time.monotonic()
    while by.rounds < 3 and by.error is None and time.monotonic() - t0 < 20 * mqdtest.SLOW:
        time.sleep(0.05)
    check(by.error is None and by.rounds >= 3, "bystander did not get going: %s" % by.error)
    issue = transfer()  # the frame of the issue
    cases = (
        ("(a) plain sender link", "hf-plain", "credit", [issue]),
        ("(b) link the ACL refused", "hf-denied", "detached", [issue]),
        ("(c) $management link", "$management", "active", [issue]),
        ("(d) anonymous relay", None, "active", [issue]),
        ("(e) no delivery-id, more=false", "hf-plain", "credit",
         [transfer(more=False, payload=b"\x00\x53\x77\xa1\x01x")]),
        ("(f) no delivery-id, more=true, aborted=true", "hf-plain", "credit",
         [transfer(more=True, aborted=True)]),
        ("(g) no delivery-id after an aborted delivery", "hf-plain", "credit",
         [transfer(delivery_id=0, tag=b"a", more=True), transfer(tag=b"a", more=False, aborted=True),
          transfer(tag=b"b", more=True)]),
        ("(h) more=true on a handle never attached", "hf-plain", "credit",
         [transfer(handle=7, delivery_id=0, more=True)]),
        ("(k) a sasl-init on an open connection", "hf-plain", "credit",
         [frame(SASL_INIT, ftype=1)]),
    )
    coll = mqdtest.Collect()
    for name, address, wait_for, frames in cases:
        with coll.case(name):
            refused(b, ctl, by, name, address, wait_for, frames)
        b.check_alive("after case %s" % name)
    with coll.case("(j) sasl-init whose mechanism is not a symbol"):
        case_sasl_mech_not_symbol(b, by)
    b.check_alive("after case (j)")
    with coll.case("(i) continuation without delivery-id is accepted"):
        case_continuation_without_id(b, ctl)
    by.stop_flag = True
    by.join(30)
    with coll.case("well-behaved client throughout"):
        check(by.error is None, "the well-behaved client failed: %s" % by.error)
        log("bystander completed %d round trips" % by.rounds)
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=180)
