#!/usr/bin/python3
"""modified(undeliverable-here) from a plain AMQP 1.0 client (Proton), docs/conformance.md
3.4.5 and docs/servicebus.md ("Deferral"): on a queue it defers, for every client.

A: 4 messages on a queue T; one receiver (credit 4) settles u-0 modified(undeliverable-here),
   u-1 modified(undeliverable-here, delivery-failed), u-2 modified (neither), u-3
   accepted. A second receiver then gets exactly u-1 (delivery-count 1) and u-2
   (delivery-count 0), in order: u-0 is deferred, to no link; a queue browser (copy)
   still shows u-0 only. The broker is SIGKILLed and started again: the deferral was
   durable before the outcome was settled, so a receiver gets nothing and the browser
   still shows u-0.
B: a consumer group (T/ConsumerGroups/g): modified(undeliverable-here) is not a deferral
   there: the group's next reader gets the message again (delivery-count 0).
C: a scheduled message from plain clients (docs/servicebus.md): Proton sends "now" and
   then "later" with x-opt-scheduled-enqueue-time 3 s ahead; a pika (AMQP 0-9-1) consumer
   of the queue gets "now" at once and "later" only at its time (within 2 s of it), woken
   by the scheduled-message timer with no other traffic.
D: the same for a Proton receiver with a selector (color = 'red') on a queue: it gets the
   red "now" at once, the red "later" (scheduled 3 s ahead) only at its time, never the
   blue one.
"""
import time

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import check, log, receive, send  # noqa: E402

import amqp091test as a9  # noqa: E402
from proton import Delivery, Message, symbol, timestamp  # noqa: E402
from proton.reactor import Copy, Selector  # noqa: E402


def modified(undeliverable, failed):
    def settle(r, m, d):
        d.local.undeliverable = undeliverable
        d.local.failed = failed
        d.update(Delivery.MODIFIED)
        d.settle()
        return None
    return settle


OUTCOMES = {"u-0": modified(True, False), "u-1": modified(True, True), "u-2": modified(False, False)}


def by_body(r, m, d):
    fn = OUTCOMES.get(m.body)
    if fn is None:
        return "accept"
    fn(r, m, d)
    return None


def browse(b, topic):
    return receive(b.url, topic, idle=1.5 * mqdtest.SLOW, options=Copy(), timeout=60).bodies()


def case_queue(b):
    topic = "uh178"
    send(b.url, topic, [Message(body="u-%d" % i) for i in range(4)])
    r = receive(b.url, topic, count=4, credit=4, settle=by_body, linger=0.5 * mqdtest.SLOW, timeout=60)
    check(r.bodies() == ["u-0", "u-1", "u-2", "u-3"], "first receiver got %s" % r.bodies())
    again = receive(b.url, topic, idle=1.5 * mqdtest.SLOW, timeout=60)
    check(again.bodies() == ["u-1", "u-2"], "the second receiver got %s, want u-1 and u-2 (u-0 deferred)"
          % again.bodies())
    dcs = [m.delivery_count for m in again.got]
    check(dcs == [1, 0], "delivery-counts %s, want [1, 0]" % dcs)
    shown = browse(b, topic)
    check(shown == ["u-0"], "the browser shows %s, want the deferred u-0 only" % shown)
    log("A: undeliverable-here deferred u-0; failed+undeliverable and plain modified came back")
    b.restart(kill=True)
    after = receive(b.url, topic, idle=1.5 * mqdtest.SLOW, timeout=60)
    check(after.bodies() == [], "after a SIGKILL restart a receiver got %s" % after.bodies())
    shown = browse(b, topic)
    check(shown == ["u-0"], "after the restart the browser shows %s" % shown)
    log("A: the deferral survived a SIGKILL restart")


def case_group(b):
    topic = "uh178g"
    addr = topic + "/ConsumerGroups/g"
    send(b.url, topic, [Message(body="g-0"), Message(body="g-1")])

    def first_undeliverable(r, m, d):
        if m.body == "g-0":
            return modified(True, False)(r, m, d)
        return "accept"
    r = receive(b.url, addr, count=2, credit=2, settle=first_undeliverable, linger=0.3 * mqdtest.SLOW,
                timeout=60)
    check(r.bodies() == ["g-0", "g-1"], "group reader got %s" % r.bodies())
    again = receive(b.url, addr, count=1, linger=1.0 * mqdtest.SLOW, timeout=60)
    check(again.bodies() == ["g-0"], "the group's next reader got %s, want g-0 again" % again.bodies())
    check(again.got[0].delivery_count == 0, "delivery-count %s" % again.got[0].delivery_count)
    log("B: on a consumer group undeliverable-here is not a deferral: g-0 came back")


def case_scheduled_091(t):
    a9.need_pika()
    conf = os.path.join(t.tmpdir, "mqd091.conf")
    with open(conf, "w") as f:
        f.write("allow_anonymous = off\n" + a9.mqd_passwd("alice", "alice-pw"))
        f.write("[acl]\nallow alice send,receive,create uh.*\n")
    b = t.broker("sched091", conf=conf)
    due = time.time() + 3.0 * mqdtest.SLOW
    c = a9.proton_conn(b.url, "alice", "alice-pw")
    s = c.create_sender("uh.sched")
    s.send(Message(body="now"))
    s.send(Message(body="later", annotations={symbol("x-opt-scheduled-enqueue-time"):
                                              timestamp(int(due * 1000))}))
    c.close()
    conn = a9.connect(b.port, "alice", "alice-pw")
    ch = conn.channel()
    ch.basic_qos(prefetch_count=10)
    got = []
    deadline = due + 10 * mqdtest.SLOW
    for method, props, body in ch.consume("uh.sched", auto_ack=False, inactivity_timeout=0.2):
        if method is not None:
            got.append((body.decode(), time.time()))
            ch.basic_ack(method.delivery_tag)
        if len(got) == 2 or time.time() > deadline:
            break
    ch.cancel()
    conn.close()
    names = [g[0] for g in got]
    check(names == ["now", "later"], "the 0-9-1 consumer got %s" % names)
    check(got[0][1] < due, "'now' came %.2f s after the scheduled time" % (got[0][1] - due))
    late = got[1][1] - due
    check(-0.05 <= late <= 2.0 * mqdtest.SLOW, "'later' came %.2f s after its time" % late)
    log("C: a pika consumer got the scheduled message %.2f s after its time, not before" % late)


def case_scheduled_selector(b):
    topic = "uh178sel"
    due = time.time() + 3.0 * mqdtest.SLOW
    later = {symbol("x-opt-scheduled-enqueue-time"): timestamp(int(due * 1000))}
    send(b.url, topic, [Message(body="blue", properties={"color": "blue"}),
                        Message(body="later", properties={"color": "red"}, annotations=later),
                        Message(body="now", properties={"color": "red"})])
    times = []
    r = mqdtest.Receiver(b.url, topic, count=2, linger=1.0 * mqdtest.SLOW,
                         options=Selector("color = 'red'"))
    r.on_each = lambda rr, m, d: times.append(time.time())
    mqdtest.run_container(r, 60)
    check(r.bodies() == ["now", "later"], "the selector receiver got %s" % r.bodies())
    check(times[0] < due, "'now' came %.2f s after the scheduled time" % (times[0] - due))
    late = times[1] - due
    check(-0.05 <= late <= 2.0 * mqdtest.SLOW, "'later' came %.2f s after its time" % late)
    log("D: a selector receiver got the scheduled message %.2f s after its time" % late)


def body(t):
    b = t.broker(sets={"topic.uh178.partitions": 1, "topic.uh178g.partitions": 1})
    coll = mqdtest.Collect()
    for name, fn in (("B: consumer group", lambda: case_group(b)),
                     ("A: queue", lambda: case_queue(b)),
                     ("C: scheduled, 0-9-1 consumer", lambda: case_scheduled_091(t)),
                     ("D: scheduled, selector", lambda: case_scheduled_selector(b))):
        with coll.case(name):
            fn()
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=300)
