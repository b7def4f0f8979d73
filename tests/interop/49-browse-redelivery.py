#!/usr/bin/python3
"""Browse settlement and redelivery headers (issue 17 points 2 and 3).

A (Proton blocking, queue_browser.py style): a receiver with distribution-mode copy
   takes 10 messages one by one and accept()s each: every delivery arrives unsettled
   (no IndexError from accept), bodies in order; a second browser releases / rejects /
   modifies its copies; a plain receiver then still gets all 10 with delivery-count 0
   (a copy's outcome changes nothing on the broker).
B (Proton event-driven): a copy receiver that asks for snd-settle-mode settled
   (AtMostOnce) gets its 5 deliveries pre-settled; one without gets them unsettled.
C (Proton event-driven): credit 10, accept 5, leave 5 unsettled, the TCP connection is
   dropped (socket shut down, no AMQP close): the next receiver gets exactly the 5, with
   header delivery-count 1 and first-acquirer false; the stored messages had no header
   (one is created) or a header (durable, priority 7, ttl: kept byte for byte); bodies
   and application properties intact. A release does not raise the count (still 1) but
   keeps first-acquirer false.
D (restart): 5 delivered and outstanding when the broker stops (SIGTERM) -> after the
   restart delivery-count 1; again outstanding and the broker SIGKILLed after the
   periodic persist -> delivery-count 2.
E (max_delivery_count = 2 sees the same count): a message whose consumer connection
   drops twice is dead-lettered, not delivered a third time.
G (Proton): a browser with Selector("colour = 'red'") gets copies of the 3 red ones of 9;
   a consumer then gets all 9 (browsing with a selector consumes nothing).
F (uamqp over TLS): a ReceiveClient that settles nothing and closes; the next one gets
   the 5 with header delivery_count 1.
"""

import os
import shutil
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import Receiver, ann, check, log, receive, run_container, send  # noqa: E402

from proton import Message  # noqa: E402
from proton.reactor import AtMostOnce, Copy, Selector  # noqa: E402


def bodies(prefix, n):
    return ["%s-%02d" % (prefix, i) for i in range(n)]


def case_blocking_browse(b):
    from proton import Timeout
    from proton.utils import BlockingConnection
    topic = "br49a"
    send(b.url, topic, [Message(body=x) for x in bodies(topic, 10)])
    conn = BlockingConnection(b.url, timeout=30 * mqdtest.SLOW)
    got = []
    try:
        rcv = conn.create_receiver(topic, options=Copy(), credit=10)
        for _ in range(10):
            m = rcv.receive(timeout=10 * mqdtest.SLOW)
            got.append(m.body)
            try:
                rcv.accept()
            except IndexError as e:
                check(False, "BlockingReceiver.accept() on browse delivery %d raised IndexError: %s (the "
                      "delivery arrived pre-settled)" % (len(got), e))
        try:
            extra = rcv.receive(timeout=1.0 * mqdtest.SLOW)
            check(False, "the browser got an 11th message %r" % extra.body)
        except Timeout:
            pass
        rcv.close()
        # a second browser: release, reject, modify copies; nothing changes
        rcv2 = conn.create_receiver(topic, options=Copy(), credit=10)
        for i in range(10):
            rcv2.receive(timeout=10 * mqdtest.SLOW)
            [rcv2.release, rcv2.reject, lambda: rcv2.release(delivered=True)][i % 3]()
        rcv2.close()
    finally:
        conn.close()
    check(got == bodies(topic, 10), "blocking browser got %s" % got)
    r = receive(b.url, topic, count=10, linger=1.0 * mqdtest.SLOW, timeout=60)
    check(r.bodies() == bodies(topic, 10), "after browsing, a consumer got %s" % r.bodies())
    dcs = [m.delivery_count for m in r.got]
    check(dcs == [0] * 10, "after browsing, delivery-counts %s, want all 0" % dcs)
    log("A: blocking browser accepted 10 unsettled copies; consumer still got all 10, count 0")


def case_settle_mode(b):
    topic = "br49b"
    send(b.url, topic, [Message(body=x) for x in bodies(topic, 5)])
    seen = {}
    for name, opts in (("settled", [Copy(), AtMostOnce()]), ("unsettled", Copy())):
        flags = []

        def policy(r, m, d, flags=flags):
            flags.append(d.settled)
            return None if d.settled else "accept"
        r = receive(b.url, topic, count=5, linger=0.5, options=opts, settle=policy, timeout=60)
        check(r.bodies() == bodies(topic, 5), "%s browser got %s" % (name, r.bodies()))
        seen[name] = flags
    check(seen["settled"] == [True] * 5, "snd-settle-mode settled browser: settled flags %s" % seen["settled"])
    check(seen["unsettled"] == [False] * 5, "default browser: settled flags %s, want all False"
          % seen["unsettled"])
    log("B: settled-mode browser got pre-settled copies, the default one unsettled")


def case_browse_selector(b):
    topic = "br49g"
    cols = ["red", "green", "blue"]
    send(b.url, topic, [Message(body="%s-%02d" % (topic, i), properties={"colour": cols[i % 3]})
                        for i in range(9)])
    r = receive(b.url, topic, idle=1.5 * mqdtest.SLOW, options=[Copy(), Selector("colour = 'red'")],
                timeout=60)
    want = ["%s-%02d" % (topic, i) for i in (0, 3, 6)]
    check(r.bodies() == want, "browser with colour = 'red' got %s, want %s" % (r.bodies(), want))
    c = receive(b.url, topic, count=9, linger=1.0 * mqdtest.SLOW, timeout=60)
    check(c.bodies() == ["%s-%02d" % (topic, i) for i in range(9)],
          "after the selective browser a consumer got %s: a browser consumes nothing" % c.bodies())
    log("G: a selective browser saw the 3 red copies; a consumer then got all 9")


class DropAfter(Receiver):
    """Takes `credit`, accepts the first `accept`, leaves the rest unsettled, then
    shuts the TCP socket down under Proton (no AMQP close, no detach)."""

    def __init__(self, url, topic, credit, accept):
        # the linger lets the accepts reach the broker before the drop
        super().__init__(url, topic, count=credit, credit=credit, linger=0.5 * mqdtest.SLOW,
                         settle=lambda r, m, d: "accept" if len(r.got) <= accept else None)

    def close_now(self):
        self._shutdown_socket()
        self.finish()
        self.done = True

    def _shutdown_socket(self):
        port = int(self.url.rsplit(":", 1)[1])
        for fd in os.listdir("/proc/self/fd"):
            try:
                s = socket.socket(fileno=os.dup(int(fd)))
            except OSError:
                continue
            try:
                if s.type == socket.SOCK_STREAM and s.getpeername()[1] == port:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            finally:
                s.close()


class Holder(Receiver):
    """Takes `credit` and settles nothing until its connection goes (the broker stops)."""

    def __init__(self, url, topic, credit):
        super().__init__(url, topic, count=credit, credit=credit, settle=lambda r, m, d: None)

    def close_now(self):
        pass

    def on_transport_closed(self, event):
        self.done = True


def hold(url, topic, credit):
    import threading
    r = Holder(url, topic, credit)
    th = threading.Thread(target=run_container, args=(r, 120), daemon=True)
    th.start()
    deadline = time.monotonic() + 30 * mqdtest.SLOW
    while len(r.got) < credit and time.monotonic() < deadline:
        time.sleep(0.05)
    check(len(r.got) == credit, "holding receiver got %d of %d" % (len(r.got), credit))
    return r, th


def take_and_drop(url, topic, credit=10, accept=5):
    r = DropAfter(url, topic, credit, accept)
    run_container(r, 60)
    check(len(r.got) == credit, "dropping receiver got %d of %d" % (len(r.got), credit))
    return r


def case_dropped(b):
    topic = "rd49c"
    msgs = []
    for i in range(10):
        if i % 2:
            msgs.append(Message(body="%s-%02d" % (topic, i), durable=True, priority=7, ttl=600,
                                properties={"i": i}))
        else:
            msgs.append(Message(body="%s-%02d" % (topic, i), properties={"i": i}))
    send(b.url, topic, msgs)
    r1 = take_and_drop(b.url, topic)
    firsts = [(m.delivery_count, m.first_acquirer) for m in r1.got]
    log("C: first deliveries (delivery-count, first-acquirer): %s" % firsts)
    check(all(dc == 0 for dc, _ in firsts), "first deliveries had delivery-counts %s" % firsts)
    time.sleep(0.3)
    again = []

    def release(r, m, d):
        again.append(m)
        return "release"
    r2 = receive(b.url, topic, count=5, credit=5, linger=1.0 * mqdtest.SLOW, timeout=60, settle=release)
    got = r2.bodies()
    want = ["%s-%02d" % (topic, i) for i in range(5, 10)]
    check(got == want, "after the drop the next receiver got %s, want %s" % (got, want))
    for m in again:
        i = int(m.body.rsplit("-", 1)[1])
        check(m.delivery_count == 1 and m.first_acquirer is False,
              "%s redelivered with delivery-count %r first-acquirer %r, want 1, False"
              % (m.body, m.delivery_count, m.first_acquirer))
        check(m.properties == {"i": i}, "%s: application properties %r" % (m.body, m.properties))
        if i % 2:
            check(m.durable is True and m.priority == 7 and abs(m.ttl - 600) < 0.01,
                  "%s: header fields lost: durable %r priority %r ttl %r" % (m.body, m.durable, m.priority, m.ttl))
        else:
            check(not m.durable and m.priority == 4, "%s: header %r %r" % (m.body, m.durable, m.priority))
        check(int(ann(m, "x-opt-sequence-number")) == i, "%s: offset %r" % (m.body, ann(m, "x-opt-sequence-number")))
    # they were released once more: the count stays 1, first-acquirer false
    r3 = receive(b.url, topic, count=5, linger=1.0 * mqdtest.SLOW, timeout=60)
    check(r3.bodies() == want, "after the release the next receiver got %s" % r3.bodies())
    states = [(m.delivery_count, m.first_acquirer) for m in r3.got]
    check(states == [(1, False)] * 5, "after a release: (delivery-count, first-acquirer) %s, want (1, False)"
          % states)
    log("C: the 5 unsettled came back with delivery-count 1, first-acquirer false, headers kept; "
        "a release kept the count at 1")


def case_restart(b):
    topic = "rd49d"
    send(b.url, topic, [Message(body=x) for x in bodies(topic, 5)])
    r, th = hold(b.url, topic, 5)
    b.stop()
    th.join(30)
    b.start()
    r2 = DropAfter(b.url, topic, 5, 0)
    run_container(r2, 60)
    dcs = [m.delivery_count for m in r2.got]
    fa = [m.first_acquirer for m in r2.got]
    check(r2.bodies() == bodies(topic, 5) and dcs == [1] * 5 and fa == [False] * 5,
          "after a SIGTERM restart: %s delivery-counts %s first-acquirer %s, want 1 and False"
          % (r2.bodies(), dcs, fa))
    log("C/D: outstanding at a clean stop -> delivery-count 1 after the restart")
    # r2 dropped its connection holding them all: count 2 now; deliver once more, unsettled,
    # let the periodic persist run, then SIGKILL
    r3, th = hold(b.url, topic, 5)
    check([m.delivery_count for m in r3.got] == [2] * 5, "third delivery counts %s, want 2"
          % [m.delivery_count for m in r3.got])
    time.sleep(2.5 * mqdtest.SLOW)  # the 1 s persist timer saves the outstanding state
    b.kill()
    th.join(30)
    b.start()
    r4 = receive(b.url, topic, count=5, linger=0.5, timeout=60)
    dcs = [m.delivery_count for m in r4.got]
    check(r4.bodies() == bodies(topic, 5) and dcs == [3] * 5,
          "after a SIGKILL restart: %s delivery-counts %s, want 3 (three attempts never settled)"
          % (r4.bodies(), dcs))
    log("D: outstanding at a SIGKILL -> delivery-count 3 after the restart")


def case_max_delivery(b):
    topic = "mx49e"
    send(b.url, topic, [Message(body="poison"), Message(body="fine")])
    r1 = take_and_drop(b.url, topic, credit=1, accept=0)
    check(r1.bodies() == ["poison"], "first: %s" % r1.bodies())
    r2 = take_and_drop(b.url, topic, credit=1, accept=0)
    check(r2.bodies() == ["poison"] and r2.got[0].delivery_count == 1, "second: %s count %s"
          % (r2.bodies(), [m.delivery_count for m in r2.got]))
    r3 = receive(b.url, topic, idle=1.5 * mqdtest.SLOW, timeout=60)
    check(r3.bodies() == ["fine"], "after two dropped attempts (max_delivery_count=2) got %s, want "
          "['fine'] (poison dead-lettered)" % r3.bodies())
    d = receive(b.url, topic + "/$DeadLetterQueue", idle=1.5 * mqdtest.SLOW, timeout=60)
    check(d.bodies() == ["poison"], "dead-letter queue holds %s" % d.bodies())
    log("E: max_delivery_count=2 dead-lettered after two dropped connections")


def case_uamqp(t, b):
    try:
        import uamqp
        from uamqp import authentication
    except ImportError as e:
        log("F: skipped, python3-uamqp not importable: %s" % e)
        return
    for tool in ("socat", "openssl"):
        if not shutil.which(tool):
            log("F: skipped, %s not installed" % tool)
            return
    topic = "ua49f"
    send(b.url, topic, [Message(body=x.encode()) for x in bodies(topic, 5)])
    key, crt = os.path.join(t.tmpdir, "relay.key"), os.path.join(t.tmpdir, "relay.crt")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", crt,
                    "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    port = mqdtest.free_port()
    relay_log = open(os.path.join(t.tmpdir, "socat.log"), "wb")
    t.spawn(["socat", "-d", "OPENSSL-LISTEN:%d,bind=127.0.0.1,reuseaddr,fork,cert=%s,key=%s,verify=0"
             % (port, crt, key), "TCP:127.0.0.1:%d" % b.port], stdout=relay_log, stderr=subprocess.STDOUT)
    mqdtest.wait_port(port, 15, what="socat TLS relay")
    addr = "amqps://localhost:%d/%s" % (port, topic)

    def batch(settle):
        auth = authentication.SASLAnonymous(hostname="localhost", port=port, verify=crt)
        rc = uamqp.ReceiveClient(addr, auth=auth, prefetch=5, timeout=0, auto_complete=False)
        got = []
        deadline = time.monotonic() + 30 * mqdtest.SLOW
        try:
            while len(got) < 5 and time.monotonic() < deadline:
                for m in rc.receive_message_batch(max_batch_size=5, timeout=2000):
                    if settle:
                        m.accept()
                    got.append(m)
        finally:
            rc.close()
        return got
    first = batch(False)
    check(len(first) == 5, "uamqp first receiver got %d" % len(first))
    again = batch(True)
    dcs = [m.header.delivery_count if m.header else None for m in again]
    data = [(lambda d: d if isinstance(d, bytes) else b"".join(d))(m.get_data()).decode() for m in again]
    check(data == bodies(topic, 5) and dcs == [1] * 5,
          "uamqp: after a close without settling got %s with delivery_count %s, want 1" % (data, dcs))
    log("F: uamqp: redelivered with header delivery_count 1")


def body(t):
    b = t.broker(sets={"topic.br49a.partitions": 1, "topic.br49b.partitions": 1,
                       "topic.rd49c.partitions": 1, "topic.rd49d.partitions": 1,
                       "topic.mx49e.partitions": 1, "topic.mx49e.max_delivery_count": 2,
                       "topic.ua49f.partitions": 1, "topic.br49g.partitions": 1})
    coll = mqdtest.Collect()
    for name, fn in (("A: blocking browser accepts", lambda: case_blocking_browse(b)),
                     ("B: browse settle modes", lambda: case_settle_mode(b)),
                     ("G: browser with a selector", lambda: case_browse_selector(b)),
                     ("C: dropped connection", lambda: case_dropped(b)),
                     ("D: restart", lambda: case_restart(b)),
                     ("E: max_delivery_count", lambda: case_max_delivery(b)),
                     ("F: uamqp", lambda: case_uamqp(t, b))):
        with coll.case(name):
            fn()
        if not b.alive():
            b.start()
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=400)
