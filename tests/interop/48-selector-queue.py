#!/usr/bin/python3
"""A selector on a queue (plain address T, the shared group $shared) chooses what that
link receives; what it does not select stays, in order, for the queue's other consumers
(JMS queue selectors, as in ActiveMQ / Artemis). Issue 17 point 1.

A (Proton event-driven): 30 messages, application property colour red/green/blue. A
   receiver with Selector("colour = 'red'") gets the 10 red ones in order and closes;
   the group's committed offset (mqctl group describe) is then 1, the first green one;
   a plain receiver gets the 20 green and blue ones in order; then nothing is left.
B (Proton blocking API): two selective receivers (red, blue) and a plain one open at
   once on the same queue; the red one releases one of its messages: the plain one gets
   it (first-acquirer false, delivery-count 0), the blue one never does; each message
   goes to exactly one receiver, each receiver's share in offset order.
C (restart): after a selective receiver took the red ones, the broker stops and starts:
   a plain receiver gets exactly the 20 others, in order (the red ones stay consumed).
F (Proton blocking): a plain receiver holds 00-02 unsettled; a red receiver gets 03 and
   06; the plain one releases 00 (it has no credit left): the red receiver gets it
   (behind its scan position, from the group's released records), first-acquirer
   false; the plain one then gets 04 05 07 08; committed offset 9.
G: 20,000 records the selector does not match, then 5 red ones: the selective receiver
   gets the 5 (its scan continues over several loop turns), committed stays 0; a plain
   receiver then gets the 20,000 in order; committed 20,005.
D (uamqp over TLS, a socat relay as in 13): a selective receive client (described
   apache.org:selector-filter:string) gets only the green ones, in order; a plain uamqp
   receiver then gets the red and blue ones.
E (load, 10,000 messages on 2 partitions): 3 receivers with different selectors and 1
   plain receiver at once: every message consumed exactly once, each selective receiver
   only its colour, per partition in offset order; the broker's CPU time per message is
   logged against a plain-only drain of the same count (a figure, not an assertion).
"""

import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import ann, check, log, receive, send  # noqa: E402

from proton import Message  # noqa: E402
from proton.handlers import MessagingHandler  # noqa: E402
from proton.reactor import Container, Selector  # noqa: E402

COLOURS = ["red", "green", "blue"]
N = 30
LOAD_N = 10000


def msgs(prefix, n=N, data=False):
    """data: bodies as data sections (bytes), which uamqp's get_data() reads."""
    return [Message(body=("%s-%02d" % (prefix, i)).encode() if data else "%s-%02d" % (prefix, i),
                    properties={"colour": COLOURS[i % 3], "i": i})
            for i in range(n)]


def names(prefix, pred, n=N):
    return ["%s-%02d" % (prefix, i) for i in range(n) if pred(i)]


def committed(b, topic):
    rc, out, err = mqdtest.mqctl(b.url, "--json", "group", "describe", topic, "$shared")
    check(rc == 0, "mqctl group describe %s $shared: %d %s" % (topic, rc, err))
    v = json.loads(out)
    parts = v.get("partitions", v) if isinstance(v, dict) else v
    return [p["committed"] for p in parts]


def case_event_driven(b):
    topic = "q48a"
    send(b.url, topic, msgs(topic))
    r = receive(b.url, topic, idle=1.5 * mqdtest.SLOW, options=Selector("colour = 'red'"),
                close="link", timeout=60)
    want = names(topic, lambda i: i % 3 == 0)
    check(r.bodies() == want, "selective receiver got %s, want the 10 red %s" % (r.bodies(), want))
    for m in r.got:
        check(m.properties.get("colour") == "red", "selective receiver got %r" % (m.properties,))
    time.sleep(0.3)
    floor = committed(b, topic)
    check(floor == [1], "committed offset after the red ones: %s, want [1] (offset 1, the first "
          "green message, was consumed by no one)" % floor)
    r2 = receive(b.url, topic, idle=1.5 * mqdtest.SLOW, close="link", timeout=60)
    want2 = names(topic, lambda i: i % 3 != 0)
    check(r2.bodies() == want2, "plain receiver after the selective one got %d: %s, want the 20 "
          "green and blue in order %s" % (len(r2.got), r2.bodies(), want2))
    offs = [int(ann(m, "x-opt-sequence-number")) for m in r2.got]
    check(offs == [i for i in range(N) if i % 3 != 0], "plain receiver's offsets %s" % offs)
    r3 = receive(b.url, topic, idle=1.0 * mqdtest.SLOW, timeout=60)
    check(not r3.got, "a third receiver got %s: nothing should be left" % r3.bodies())
    time.sleep(0.3)
    floor = committed(b, topic)
    check(floor == [N], "committed offset at the end: %s, want [%d]" % (floor, N))
    log("A: red receiver 10 in order, committed stayed at 1, plain receiver the other 20 in order")


def blocking_take(rcv, timeout):
    from proton import Timeout
    try:
        return rcv.receive(timeout=timeout)
    except Timeout:
        return None


def case_blocking(b):
    from proton.utils import BlockingConnection
    topic = "q48b"
    send(b.url, topic, msgs(topic))
    conn = BlockingConnection(b.url, timeout=30 * mqdtest.SLOW)
    try:
        red = conn.create_receiver(topic, name="red", options=Selector("colour = 'red'"), credit=0)
        blue = conn.create_receiver(topic, name="blue", options=Selector("colour = 'blue'"), credit=0)
        plain = conn.create_receiver(topic, name="plain", credit=0)
        got = {"red": [], "blue": [], "plain": []}
        # red: take 1, release it, then take the rest
        red.flow(1)
        m = blocking_take(red, 10 * mqdtest.SLOW)
        check(m is not None and m.body == topic + "-00", "red's first message: %r" % (m and m.body))
        red.release()
        log("B: red released %s" % m.body)
        released = m.body
        # the plain receiver first: it gets the released one (red has no credit now)
        plain.flow(1)
        m = blocking_take(plain, 10 * mqdtest.SLOW)
        check(m is not None and m.body == released, "plain's first message: %r, want the released %s"
              % (m and m.body, released))
        got["plain"].append(m)
        plain.accept()
        plain.flow(100)
        blue.flow(100)
        red.flow(100)
        deadline = time.monotonic() + 30 * mqdtest.SLOW
        quiet = None
        while time.monotonic() < deadline:
            n = 0
            for name, rcv in (("red", red), ("blue", blue), ("plain", plain)):
                mm = blocking_take(rcv, 0.2)
                if mm is not None:
                    got[name].append(mm)
                    rcv.accept()
                    n += 1
            total = sum(len(v) for v in got.values())
            if n == 0 and total >= N:
                quiet = quiet or time.monotonic()
                if time.monotonic() - quiet > 1.0 * mqdtest.SLOW:
                    break
            else:
                quiet = None
    finally:
        conn.close()
    bodies = {k: [mm.body for mm in v] for k, v in got.items()}
    log("B: red %d blue %d plain %d" % tuple(len(bodies[k]) for k in ("red", "blue", "plain")))
    allb = bodies["red"] + bodies["blue"] + bodies["plain"]
    check(sorted(allb) == names(topic, lambda i: True), "bodies received: %d, duplicates or missing: %s"
          % (len(allb), sorted(set(names(topic, lambda i: True)) ^ set(allb))))
    check(all(mm.properties["colour"] == "red" for mm in got["red"]), "red got %s" % bodies["red"])
    check(all(mm.properties["colour"] == "blue" for mm in got["blue"]), "blue got %s" % bodies["blue"])
    check(released not in bodies["blue"], "blue received the released red message")
    for k in got:
        offs = [int(ann(mm, "x-opt-sequence-number")) for mm in got[k] if mm.body != released]
        check(offs == sorted(offs), "%s's messages out of offset order: %s" % (k, offs))
    again = [mm for v in got.values() for mm in v if mm.body == released]
    check(len(again) == 1, "the released message arrived %d times" % len(again))
    check(again[0].first_acquirer is False and again[0].delivery_count == 0,
          "the released message came back with first-acquirer %r delivery-count %r, want False, 0"
          % (again[0].first_acquirer, again[0].delivery_count))
    first = [mm for v in got.values() for mm in v if mm.body != released]
    check(all(mm.first_acquirer is not False or mm.delivery_count == 0 for mm in first), "bad header")
    log("B: every message once; released %s redelivered with first-acquirer false" % released)


def case_released_behind(b):
    """A record released by another link behind a selective link's scan position."""
    from proton.utils import BlockingConnection
    topic = "q48f"
    send(b.url, topic, msgs(topic, 9))
    conn = BlockingConnection(b.url, timeout=30 * mqdtest.SLOW)
    try:
        plain = conn.create_receiver(topic, name="plain", credit=0)
        red = conn.create_receiver(topic, name="red", options=Selector("colour = 'red'"), credit=0)
        plain.flow(3)
        held = [blocking_take(plain, 10 * mqdtest.SLOW) for _ in range(3)]
        check([m and m.body for m in held] == names(topic, lambda i: i < 3, 9),
              "plain took %s" % [m and m.body for m in held])
        red.flow(10)
        reds = [blocking_take(red, 10 * mqdtest.SLOW) for _ in range(2)]
        check([m and m.body for m in reds] == [topic + "-03", topic + "-06"],
              "red while 00 is held: %s" % [m and m.body for m in reds])
        for _ in reds:
            red.accept()
        # plain gives 00 (red) back, and has no credit: only red can take it now
        plain.release()  # settles the oldest unsettled: 00
        m = blocking_take(red, 10 * mqdtest.SLOW)
        check(m is not None and m.body == topic + "-00", "after the release red got %r, want %s-00"
              % (m and m.body, topic))
        check(m.first_acquirer is False and m.delivery_count == 0,
              "red got the released 00 with first-acquirer %r delivery-count %r" % (m.first_acquirer, m.delivery_count))
        red.accept()
        extra = blocking_take(red, 1.0 * mqdtest.SLOW)
        check(extra is None, "red got an extra %r" % (extra and extra.body))
        plain.accept()
        plain.accept()  # 01, 02
        plain.flow(10)
        rest = [blocking_take(plain, 5 * mqdtest.SLOW) for _ in range(4)]
        check([x and x.body for x in rest] == [topic + "-04", topic + "-05", topic + "-07", topic + "-08"],
              "plain's rest: %s" % [x and x.body for x in rest])
        for _ in rest:
            plain.accept()
        extra = blocking_take(plain, 1.0 * mqdtest.SLOW)
        check(extra is None, "plain got an extra %r" % (extra and extra.body))
    finally:
        conn.close()
    time.sleep(0.3)
    check(committed(b, topic) == [9], "committed after all 9: %s" % committed(b, topic))
    log("F: red took the 00 plain released behind its scan position; every record once, committed 9")


def case_long_skip(b):
    """A selective receiver whose matches lie behind 20,000 records it does not select:
    its scan goes on over several loop turns (4,096 records per turn) to the end."""
    topic = "q48g"
    skip_n = 20000
    batch = [Message(body="skip-%05d" % i, properties={"colour": "other"}) for i in range(skip_n)]
    batch += [Message(body="red-%d" % i, properties={"colour": "red"}) for i in range(5)]
    send(b.url, topic, batch, timeout=300)
    t0 = time.monotonic()
    r = receive(b.url, topic, count=5, linger=0.5, options=Selector("colour = 'red'"), close="link",
                timeout=120)
    took = time.monotonic() - t0
    check(r.bodies() == ["red-%d" % i for i in range(5)], "selective receiver got %s" % r.bodies())
    offs = [int(ann(m, "x-opt-sequence-number")) for m in r.got]
    check(offs == list(range(skip_n, skip_n + 5)), "offsets %s" % offs)
    time.sleep(0.3)
    check(committed(b, topic) == [0], "committed after the reds: %s, want [0]" % committed(b, topic))
    r2 = receive(b.url, topic, idle=2.0 * mqdtest.SLOW, timeout=120)
    check(len(r2.got) == skip_n and r2.got[0].body == "skip-00000" and r2.got[-1].body == "skip-%05d" % (skip_n - 1),
          "the plain receiver got %d of the %d others" % (len(r2.got), skip_n))
    check(r2.bodies() == ["skip-%05d" % i for i in range(skip_n)], "the others out of order")
    time.sleep(0.3)
    check(committed(b, topic) == [skip_n + 5], "committed at the end: %s" % committed(b, topic))
    log("G: 5 reds behind %d others found in %.2f s; the %d others then went to a plain receiver in order"
        % (skip_n, took, skip_n))


def case_restart(b):
    topic = "q48c"
    send(b.url, topic, msgs(topic))
    r = receive(b.url, topic, idle=1.5 * mqdtest.SLOW, options=Selector("colour = 'red'"),
                close="link", timeout=60)
    check(r.bodies() == names(topic, lambda i: i % 3 == 0), "selective receiver got %s" % r.bodies())
    b.stop()
    b.start()
    r2 = receive(b.url, topic, idle=1.5 * mqdtest.SLOW, timeout=60)
    want = names(topic, lambda i: i % 3 != 0)
    check(r2.bodies() == want, "after a restart a plain receiver got %s, want %s" % (r2.bodies(), want))
    log("C: after the restart the plain receiver got the 20 others, in order")


def uamqp_case(t, b):
    try:
        import uamqp
        from uamqp import authentication
        from uamqp.address import Source
    except ImportError as e:
        log("D: skipped, python3-uamqp not importable: %s" % e)
        return "skipped"
    for tool in ("socat", "openssl"):
        if not shutil.which(tool):
            log("D: skipped, %s not installed" % tool)
            return "skipped"
    topic = "q48d"
    send(b.url, topic, msgs(topic, data=True))
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

    def drain(source, want_n):
        auth = authentication.SASLAnonymous(hostname="localhost", port=port, verify=crt)
        rc = uamqp.ReceiveClient(source, auth=auth, prefetch=50, timeout=0)
        got = []
        deadline = time.monotonic() + 30 * mqdtest.SLOW
        try:
            while len(got) < want_n and time.monotonic() < deadline:
                for m in rc.receive_message_batch(max_batch_size=50, timeout=2000):
                    m.accept()
                    got.append(m)
            for m in rc.receive_message_batch(max_batch_size=50, timeout=1000):
                m.accept()
                got.append(m)
        finally:
            rc.close()
        def text(m):
            d = m.get_data()
            return (d if isinstance(d, bytes) else b"".join(d)).decode()
        return [text(m) for m in got], got

    addr = "amqps://localhost:%d/%s" % (port, topic)
    src = Source(addr)
    src.set_filter(b"colour = 'green'", name=b"apache.org:selector-filter:string",
                   descriptor=b"apache.org:selector-filter:string")
    green, _ = drain(src, 10)
    want = names(topic, lambda i: i % 3 == 1)
    check(green == want, "uamqp selective receiver got %s, want %s" % (green, want))
    rest, _ = drain(addr, 20)
    want = names(topic, lambda i: i % 3 != 1)
    check(rest == want, "uamqp plain receiver got %s, want %s" % (rest, want))
    log("D: uamqp: 10 green through the selector, then the 20 red and blue in order")
    return "ran"


class LoadRun(MessagingHandler):
    """Receivers (name -> selector or None), each on its own connection; stops once
    `total` messages arrived or after `idle` seconds without one."""

    def __init__(self, url, topic, specs, total, idle):
        super().__init__(prefetch=200)
        self.url, self.topic, self.specs, self.total, self.idle = url, topic, specs, total, idle
        self.got = {name: [] for name in specs}
        self.count = 0
        self.last = time.monotonic()
        self.error = None

    def on_start(self, event):
        self.conns = []
        self.by_link = {}
        for name, expr in self.specs.items():
            c = event.container.connect(self.url, reconnect=False)
            self.conns.append(c)
            rl = event.container.create_receiver(c, self.topic, name=name,
                                                 options=Selector(expr) if expr else None)
            self.by_link[rl.name] = name
        event.container.schedule(0.5, self)

    def on_message(self, event):
        m = event.message
        self.got[self.by_link[event.link.name]].append(
            (m.properties.get("colour"), m.body, ann(m, "x-opt-partition-id"),
             int(ann(m, "x-opt-sequence-number"))))
        self.count += 1
        self.last = time.monotonic()
        if self.count >= self.total:
            self.stop()

    def on_timer_task(self, event):
        if not self.conns:
            return
        if time.monotonic() - self.last > self.idle:
            self.stop()
        else:
            event.container.schedule(0.5, self)

    def stop(self):
        for c in self.conns:
            c.close()
        self.conns = []

    def on_link_error(self, event):
        self.error = event.link.remote_condition
        self.stop()


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load_msgs(prefix, n):
    cols = COLOURS + ["other"]
    return [Message(body="%s-%05d" % (prefix, i), properties={"colour": cols[i % 4], "i": i})
            for i in range(n)]


def timed_drain(b, topic, specs, n):
    c0, t0 = cpu_s(b.pid), time.monotonic()
    h = LoadRun(b.url, topic, specs, n, 5.0 * mqdtest.SLOW)
    Container(h).run()
    wall, cpu = h.last - t0, cpu_s(b.pid) - c0
    check(h.error is None, "a load receiver's link failed: %s" % h.error)
    return h, wall, cpu


def case_load(b):
    topic, plain_topic = "q48e", "q48p"
    send(b.url, plain_topic, load_msgs(plain_topic, LOAD_N), timeout=300)
    send(b.url, topic, load_msgs(topic, LOAD_N), timeout=300)
    hp, wp, cp = timed_drain(b, plain_topic, {"plain": None}, LOAD_N)
    check(len(hp.got["plain"]) == LOAD_N, "plain-only drain got %d of %d" % (len(hp.got["plain"]), LOAD_N))
    specs = {"red": "colour = 'red'", "green": "colour = 'green'", "blue": "colour IN ('blue')",
             "plain": None}
    h, w, c = timed_drain(b, topic, specs, LOAD_N)
    allb = [x[1] for v in h.got.values() for x in v]
    counts = {k: len(v) for k, v in h.got.items()}
    log("E: received per receiver %s (total %d of %d)" % (counts, len(allb), LOAD_N))
    check(len(allb) == LOAD_N and len(set(allb)) == LOAD_N,
          "mixed drain: %d deliveries, %d distinct, want %d each (lost or duplicated)"
          % (len(allb), len(set(allb)), LOAD_N))
    for k in ("red", "green", "blue"):
        bad = [x for x in h.got[k] if x[0] != k]
        check(not bad, "%s receiver got other colours: %s" % (k, bad[:5]))
        check(counts[k] > 0, "%s receiver got nothing" % k)
    others = [x for x in h.got["plain"] if x[0] == "other"]
    check(len(others) == LOAD_N // 4, "plain receiver got %d 'other' messages, want all %d"
          % (len(others), LOAD_N // 4))
    for k, v in h.got.items():
        for part in (0, 1):
            offs = [x[3] for x in v if x[2] == part]
            check(offs == sorted(offs), "%s: partition %d out of order" % (k, part))
    time.sleep(0.5)
    floors = committed(b, topic)
    check(sum(floors) == LOAD_N, "committed offsets %s after the mixed drain, want a sum of %d"
          % (floors, LOAD_N))
    log("E: plain only: %d msgs in %.2f s wall (%.0f msgs/s), broker CPU %.2f s (%.0f msgs per CPU s)"
        % (LOAD_N, wp, LOAD_N / wp, cp, LOAD_N / max(cp, 0.01)))
    log("E: 3 selective + 1 plain: %d msgs in %.2f s wall (%.0f msgs/s), broker CPU %.2f s "
        "(%.0f msgs per CPU s)" % (LOAD_N, w, LOAD_N / w, c, LOAD_N / max(c, 0.01)))


def body(t):
    b = t.broker(sets={"topic.q48a.partitions": 1, "topic.q48b.partitions": 1,
                       "topic.q48c.partitions": 1, "topic.q48d.partitions": 1,
                       "topic.q48f.partitions": 1, "topic.q48g.partitions": 1,
                       "topic.q48e.partitions": 2, "topic.q48p.partitions": 2})
    coll = mqdtest.Collect()
    with coll.case("A: event-driven selective then plain"):
        case_event_driven(b)
    b.check_alive("after case A")
    with coll.case("B: blocking API, selective and plain at once"):
        case_blocking(b)
    b.check_alive("after case B")
    with coll.case("F: a release behind a selective link's scan position"):
        case_released_behind(b)
    b.check_alive("after case F")
    with coll.case("G: matches behind 20,000 unselected records"):
        case_long_skip(b)
    b.check_alive("after case G")
    with coll.case("C: restart"):
        case_restart(b)
    b.check_alive("after case C")
    with coll.case("D: uamqp"):
        uamqp_case(t, b)
    b.check_alive("after case D")
    with coll.case("E: load"):
        case_load(b)
    b.check_alive("after case E")
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=400)
