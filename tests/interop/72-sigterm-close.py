#!/usr/bin/python3
"""Issue 21 point 3: SIGTERM closes every client connection with an AMQP close carrying
amqp:connection:forced ("mqd is shutting down") instead of dropping the socket
(framing-error), and bounds the wait for clients by shutdown_grace_ms.

1. A Proton client streams durable sends (pipelined, unsettled) and holds a receiver;
   the broker gets SIGTERM mid-stream. The client must see the forced close condition
   (not a transport error), mqd must exit 0 well within the grace, and after a restart
   every send the broker had accepted is stored (none acknowledged and then lost), and
   nothing is stored that was not sent.
2. A raw client that completes open but never answers the close: mqd sends the close
   frame at once, then waits shutdown_grace_ms (1.5 s) and exits (not before, not much
   after).
3. A second SIGTERM during the grace stops at once."""

import importlib.util
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import Collect, check, log  # noqa: E402

from proton import Message  # noqa: E402
from proton.handlers import MessagingHandler  # noqa: E402
from proton.reactor import Container  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "bad_input", os.path.join(os.path.dirname(os.path.abspath(__file__)), "10-bad-input.py"))
bad_input = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bad_input)

SLOW = mqdtest.SLOW
TOTAL = 20000       # upper bound on sends; the SIGTERM comes long before
SIGTERM_AFTER = 300  # accepted sends before the signal


class Streamer(MessagingHandler):
    def __init__(self, url, proc, deadline):
        super().__init__(prefetch=10)
        self.url, self.proc, self.deadline = url, proc, deadline
        self.sent = 0
        self.accepted = set()
        self.term_at = None
        self.close_cond = None      # the remote close condition, if a close frame came
        self.transport_cond = None  # a transport error (framing-error), if any
        self.closed_at = None

    def on_start(self, event):
        self.conn = event.container.connect(self.url, reconnect=False)
        self.snd = event.container.create_sender(self.conn, "sd")
        event.container.create_receiver(self.conn, "sd-idle")
        event.container.schedule(1.0, self)

    def on_timer_task(self, event):
        if time.monotonic() > self.deadline:
            self.conn.close()
            return
        event.container.schedule(1.0, self)

    def on_sendable(self, event):
        while event.sender.credit and self.sent < TOTAL and self.term_at is None:
            m = Message(body="m%d" % self.sent, durable=True, properties={"i": self.sent})
            d = event.sender.send(m)
            d.i = self.sent
            self.sent += 1

    def on_accepted(self, event):
        self.accepted.add(event.delivery.i)
        if len(self.accepted) >= SIGTERM_AFTER and self.term_at is None:
            self.term_at = time.monotonic()
            log("SIGTERM to mqd pid %d after %d accepted, %d sent" % (self.proc.pid, len(self.accepted), self.sent))
            os.kill(self.proc.pid, signal.SIGTERM)

    def on_connection_remote_close(self, event):
        self.close_cond = event.connection.remote_condition
        self.closed_at = time.monotonic()
        event.connection.close()

    def on_connection_error(self, event):
        self.close_cond = event.connection.remote_condition
        self.closed_at = self.closed_at or time.monotonic()
        event.connection.close()

    def on_transport_error(self, event):
        self.transport_cond = event.transport.condition
        self.closed_at = self.closed_at or time.monotonic()

    def on_transport_closed(self, event):
        event.container.stop()


def wait_exit(proc, timeout):
    try:
        return proc.wait(timeout=timeout)
    except Exception:
        return None


def stored_count(b):
    rc, out, err = mqdtest.mqctl(b.url, "--json", "topic", "describe", "sd")
    check(rc == 0, "describe sd after restart: exit %d %s" % (rc, err))
    return sum(p["end"] - p["start"] for p in json.loads(out)["partition_info"])


def case_stream(t, coll):
    b = t.broker(sets={"shutdown_grace_ms": "5s", "flush": "sync"})
    s = Streamer(b.url, b.proc, time.monotonic() + 60 * SLOW)
    Container(s).run()
    check(s.term_at is not None, "never reached %d accepted sends (%d)" % (SIGTERM_AFTER, len(s.accepted)))
    rc = wait_exit(b.proc, 30 * SLOW)
    exited = time.monotonic()
    with coll.case("the client sees an AMQP close with amqp:connection:forced"):
        check(s.transport_cond is None or s.close_cond is not None,
              "socket dropped without a close frame: transport %s" % s.transport_cond)
        check(s.close_cond is not None, "no close condition (transport %s)" % s.transport_cond)
        check(s.close_cond.name == "amqp:connection:forced",
              "close condition %s, want amqp:connection:forced" % s.close_cond.name)
        check(s.close_cond.description == "mqd is shutting down",
              "close description %r" % s.close_cond.description)
        log("close after %.3fs: %s" % (s.closed_at - s.term_at, s.close_cond))
    with coll.case("mqd exits 0 once the client answered, well inside the 5 s grace"):
        check(rc == 0, "mqd exit %s" % mqdtest.describe_status(rc))
        check(exited - s.term_at < 4.5 * SLOW, "mqd took %.2fs to exit" % (exited - s.term_at))
        check("closing 1 connection" in b.log_text(), "no 'closing 1 connection' in the log")
    with coll.case("after a restart: every accepted send stored, nothing unsent"):
        b.start()
        n = stored_count(b)
        log("sent %d, accepted %d, stored %d" % (s.sent, len(s.accepted), n))
        check(len(s.accepted) <= n <= s.sent, "accepted %d, stored %d, sent %d" % (len(s.accepted), n, s.sent))
        r = mqdtest.receive(b.url, "sd", count=n, timeout=60)
        got = [m.properties["i"] for m in r.got]
        check(len(got) == n and len(set(got)) == n, "read %d (%d distinct) of %d" % (len(got), len(set(got)), n))
        missing = sorted(s.accepted - set(got))
        check(not missing, "%d accepted sends lost, first %s" % (len(missing), missing[:5]))
        check(max(got) < s.sent, "stored index %d never sent" % max(got))
        b.stop()


def case_grace(t, coll):
    b = t.broker(sets={"shutdown_grace_ms": "1500ms"})
    raw = bad_input.RawAmqp(b.port)
    raw.open()
    t0 = time.monotonic()
    os.kill(b.proc.pid, signal.SIGTERM)
    from proton import Endpoint
    got = raw.pump(lambda: raw.c.state & Endpoint.REMOTE_CLOSED, timeout=3)
    closed_in = time.monotonic() - t0
    rc = wait_exit(b.proc, 20 * SLOW)
    took = time.monotonic() - t0
    with coll.case("a silent client gets the close frame at once"):
        check(got, "no close frame from mqd (socket: %s)" % raw.closed_by_peer)
        cond = raw.c.remote_condition
        check(cond is not None and cond.name == "amqp:connection:forced", "close carried %s" % cond)
        check(closed_in < 1.0 * SLOW, "close came after %.2fs" % closed_in)
    with coll.case("mqd waits shutdown_grace_ms for the answer, then exits 0"):
        check(rc == 0, "mqd exit %s" % mqdtest.describe_status(rc))
        check(1.4 <= took < 1.5 + 3 * SLOW, "mqd exited %.2fs after SIGTERM, grace 1.5s" % took)
        check("did not answer the close" in b.log_text(), "no grace-over line in the log")
    raw.sock.close()
    b2 = t.broker(sets={"shutdown_grace_ms": "60s"})
    raw = bad_input.RawAmqp(b2.port)
    raw.open()
    t0 = time.monotonic()
    os.kill(b2.proc.pid, signal.SIGTERM)
    raw.pump(lambda: raw.c.state & Endpoint.REMOTE_CLOSED, timeout=3)
    os.kill(b2.proc.pid, signal.SIGTERM)
    rc = wait_exit(b2.proc, 20 * SLOW)
    took = time.monotonic() - t0
    with coll.case("a second SIGTERM stops at once"):
        check(rc == 0, "mqd exit %s" % mqdtest.describe_status(rc))
        check(took < 5 * SLOW, "mqd took %.2fs after the second signal (grace 60s)" % took)
    raw.sock.close()


def body(t):
    coll = Collect()
    case_stream(t, coll)
    case_grace(t, coll)
    coll.finish()


mqdtest.main(body, timeout=240)
