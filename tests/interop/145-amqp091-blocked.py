#!/usr/bin/python3
"""AMQP 0-9-1 publishers and the disk watermark (docs/amqp091.md): with the free disk
below disk_free_limit (raised to 1 TiB by a SIGHUP reload) a connection that has
published is told connection.blocked (pika announces the capability) and is not read;
a publish on another connection is nacked and nothing of it is stored; once the limit
is lowered again the first is told connection.unblocked and its publishes are
confirmed and stored."""

import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
import amqp091test as a9  # noqa: E402
from mqdtest import check, log  # noqa: E402

pika = a9.pika

PW = "alice-pw"


def body(t):
    a9.need_pika()
    users = a9.mqd_passwd("alice", PW)
    conf = os.path.join(t.tmpdir, "mqd.conf")

    def write(limit):
        with open(conf, "w") as f:
            f.write("allow_anonymous = off\ndisk_free_limit = %s\n" % limit + users)
            f.write("[acl]\nallow alice send,receive,create q.*\n")

    write("0")
    b = t.broker("blocked", conf=conf)
    conn = a9.connect(b.port, "alice", PW)
    events = []
    conn.add_on_connection_blocked_callback(lambda c_, frame: events.append("blocked"))
    conn.add_on_connection_unblocked_callback(lambda c_, frame: events.append("unblocked"))
    ch = conn.channel()
    ch.queue_declare(queue="q.wm", durable=True)
    ch.confirm_delivery()
    ch.basic_publish(exchange="", routing_key="q.wm", body=b"before")

    write("1TiB")
    os.kill(b.pid, signal.SIGHUP)
    # a connection that has published is blocked (looked at once a second) ...
    deadline = time.time() + 10 * mqdtest.SLOW
    while "blocked" not in events and time.time() < deadline:
        conn.process_data_events(time_limit=0.1)
    check(events == ["blocked"], "events while over the watermark: %r" % events)
    # ... and a publish that arrives meanwhile is nacked, nothing of it stored
    conn2 = a9.connect(b.port, "alice", PW)
    ch2 = conn2.channel()
    ch2.confirm_delivery()
    try:
        ch2.basic_publish(exchange="", routing_key="q.wm", body=b"refused")
        check(False, "a publish past the disk watermark was confirmed")
    except pika.exceptions.NackError:
        log("nacked past the watermark")

    write("0")
    os.kill(b.pid, signal.SIGHUP)
    deadline = time.time() + 10 * mqdtest.SLOW
    while "unblocked" not in events and time.time() < deadline:
        conn.process_data_events(time_limit=0.1)
    check(events == ["blocked", "unblocked"], "events after the limit was lowered: %r" % events)
    ch.basic_publish(exchange="", routing_key="q.wm", body=b"after")
    got = []
    for _ in range(3):
        m, p, bd = ch.basic_get("q.wm", auto_ack=True)
        if m is None:
            break
        got.append(bd)
    check(got == [b"before", b"after"], "stored: %r" % got)
    conn.close()
    conn2.close()


if __name__ == "__main__":
    mqdtest.main(body, timeout=120)
