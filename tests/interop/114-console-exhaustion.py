#!/usr/bin/python3
"""Trickled console requests and descriptors running out (issue 32 point 5). mqd runs
under `prlimit --nofile=256` with the web console on (console_max_connections = 24,
console_max_connections_per_ip = 8, console_header_timeout_ms = 6s), a topic `rolls` of 4
partitions with 16 KiB segments, and partition_resume_ms = 1s. A producer sends 1 KiB
messages to `rolls` throughout, so every partition rolls segments during each phase.

(a) slow loris: 500 console connections from 5 loopback addresses, each sending one
    header byte every 4 s, reconnecting when closed, for 16 s. Asserted: mqd holds at
    most 24 of them at once and at most 8 per address (the rest are closed at accept;
    counted from mqd's descriptors in /proc that live half a second, not those waiting
    in the backlog or refused);
    each one it holds is closed by the header deadline although bytes keep coming
    (within 6 s + a margin of its start, well before evhttp's 30 s idle timeout); a new
    AMQP client connects and does a round trip every half second throughout, none fails;
    after the attack a console request is answered; the refusal and deadline lines of
    the log stay bounded (one a second). Before the fix every one of those connections
    stayed open and took a descriptor.
(b) descriptors gone anyway: the broker's RLIMIT_NOFILE is lowered below the descriptors
    it has open (prlimit on its PID, as if something else had taken them all) for 6 s
    while 60 console and 60 AMQP connections wait to be accepted. Asserted: mqd does not
    spin (CPU under 30 %), the console logs one accept failure for the whole pause and
    "accepting again" after it, the AMQP listener at most one line a second, libevent's
    own per-accept "Error from accept() call" never appears; the partitions that rolled
    meanwhile fail with "Too many open files" and reject their waiting sends with
    amqp:resource-limit-exceeded; once the limit is back every failed partition resumes
    by itself (no mqctl: describe shows failed false, the log "resumed") and takes sends.
Throughout: every accepted message of `rolls` is read back exactly once, no rejected one
is stored, and every partition rolled segments (more than one .log file)."""

import json
import os
import re
import resource
import selectors
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import check, log  # noqa: E402

from proton import Delivery, Message  # noqa: E402
from proton.utils import BlockingConnection  # noqa: E402

NOFILE = 256
MAX_CONSOLE = 24
PER_IP = 8
HDR_S = 6
TRICKLE_S = 4
SOURCES = ["127.0.0.1", "127.0.1.1", "127.0.1.2", "127.0.1.3", "127.0.1.4"]
PER_SOURCE = 100
ATTACK_S = 16
LOW_S = 6
TOPIC = "rolls"
PARTS = 4
REQUEST = b"GET /ui/index.html HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow\r\n\r\n"


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Producer(threading.Thread):
    """Sends 1 KiB messages to `rolls` on one connection, ~25 a second, recording which
    were accepted and which rejected (with the condition), until stopped."""

    def __init__(self, url):
        super().__init__(daemon=True)
        self.url = url
        self.accepted, self.rejected, self.unknown = [], [], []
        self.conditions = set()
        self.error = None
        self.stop_flag = False
        self.n = 0

    def run(self):
        conn = None
        deadline = time.monotonic() + 600
        while not self.stop_flag and time.monotonic() < deadline:
            try:
                if conn is None:
                    conn = BlockingConnection(self.url, timeout=20 * mqdtest.SLOW)
                    snd = conn.create_sender(TOPIC)
                body = "r-%05d-" % self.n + "x" * 1024
                self.n += 1
                dlv = snd.send(Message(body=body), timeout=20 * mqdtest.SLOW, error_states=[])
                if dlv.remote_state == Delivery.ACCEPTED:
                    self.accepted.append(body)
                elif dlv.remote_state == Delivery.REJECTED:
                    self.rejected.append(body)
                    cond = dlv.remote.condition
                    self.conditions.add("%s: %s" % (cond.name, cond.description) if cond else "none")
                else:
                    self.unknown.append(body)
                time.sleep(0.04)
            except Exception as e:  # a lost connection: the outcome of that one is unknown
                self.unknown.append(body)
                self.error = "%s: %s" % (type(e).__name__, e)
                log("producer: %s (reconnecting)" % self.error)
                try:
                    conn.close()
                except Exception:
                    pass
                conn = None
                time.sleep(0.5)
        if conn is not None:
            conn.close()


class Prober(threading.Thread):
    """A new AMQP connection every half second: connect, send, receive, close."""

    def __init__(self, url):
        super().__init__(daemon=True)
        self.url = url
        self.ok = 0
        self.failures = []
        self.stop_flag = False

    def run(self):
        deadline = time.monotonic() + 300
        while not self.stop_flag and time.monotonic() < deadline:
            body = "probe-%d" % (self.ok + len(self.failures))
            try:
                conn = BlockingConnection(self.url, timeout=10 * mqdtest.SLOW)
                snd = conn.create_sender("probe")
                rcv = conn.create_receiver("probe", credit=1)
                snd.send(Message(body=body))
                m = rcv.receive(timeout=10 * mqdtest.SLOW)
                rcv.accept()
                conn.close()
                check(m.body == body, "probe got %r, want %r" % (m.body, body))
                self.ok += 1
            except Exception as e:
                self.failures.append("%s: %s" % (type(e).__name__, e))
            time.sleep(0.5)


class Loris:
    """Slow-loris console connections: one header byte every TRICKLE_S seconds."""

    def __init__(self, port, pid):
        self.port = port
        self.pid = pid
        self.sel = selectors.DefaultSelector()
        self.socks = {}  # socket -> [source, opened, bytes sent, next send]
        self.closed = []  # (source, lifetime)
        self.first_seen = {}  # inode of mqd's socket -> when first seen
        self.most = 0
        self.most_per_source = {}

    def open(self, src):
        s = socket.socket()
        s.bind((src, 0))
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", self.port))
        now = time.monotonic()
        self.socks[s] = [src, now, 0, now]
        self.sel.register(s, selectors.EVENT_READ)

    def _close(self, s, now):
        src, opened = self.socks[s][0], self.socks[s][1]
        self.sel.unregister(s)
        s.close()
        del self.socks[s]
        self.closed.append((src, now - opened))

    def step(self):
        """Sends what is due, notes closes and how many mqd holds."""
        now = time.monotonic()
        for s, st in list(self.socks.items()):
            if now >= st[3] and st[2] < len(REQUEST) - 4:
                try:
                    s.send(REQUEST[st[2]:st[2] + 1])
                    st[2] += 1
                except BlockingIOError:
                    pass
                except OSError:
                    self._close(s, now)
                    continue
                st[3] = now + TRICKLE_S
        for key, _ in self.sel.select(timeout=0.1):
            s = key.fileobj
            try:
                if s.recv(4096) == b"":
                    self._close(s, time.monotonic())
            except BlockingIOError:
                pass
            except OSError:
                self._close(s, time.monotonic())
        # held: for half a second at least (one refused at accept has a descriptor for
        # the moment mqd takes to close it)
        now = time.monotonic()
        seen = held_by(self.pid, self.port)
        self.first_seen = {i: self.first_seen.get(i, now) for i in seen}
        held = {}
        for i, src in seen.items():
            if now - self.first_seen[i] >= 0.5:
                held[src] = held.get(src, 0) + 1
        self.most = max(self.most, sum(held.values()))
        for src, n in held.items():
            self.most_per_source[src] = max(self.most_per_source.get(src, 0), n)

    def close_all(self):
        for s in list(self.socks):
            self._close(s, time.monotonic())


def held_by(pid, port):
    """The console connections mqd has a descriptor of (not those still waiting in the
    listener's backlog): {socket inode: source address}, from /proc."""
    inodes = set()
    try:
        for fd in os.listdir("/proc/%d/fd" % pid):
            try:
                t = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            except OSError:
                continue
            if t.startswith("socket:["):
                inodes.add(t[8:-1])
    except OSError:
        return {}
    out = {}
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            x = line.split()
            local, remote, st, inode = x[1], x[2], x[3], x[9]
            if st != "01" or inode not in inodes or int(local.split(":")[1], 16) != port:
                continue
            a = int(remote.split(":")[0], 16)
            out[inode] = socket.inet_ntoa(a.to_bytes(4, "little"))
    return out


def console_get(port, source="127.0.0.2"):
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10 * mqdtest.SLOW,
                                   source_address=(source, 0))
    c.request("GET", "/ui/index.html")
    r = c.getresponse()
    r.read()
    c.close()
    return r.status


def describe(b):
    rc, out, err = mqdtest.mqctl(b.url, "--json", "topic", "describe", TOPIC)
    check(rc == 0, "describe %s: exit %d %s" % (TOPIC, rc, err))
    return json.loads(out)


def case_loris(b, cport):
    prober = Prober(b.url)
    prober.start()
    loris = Loris(cport, b.pid)
    for src in SOURCES:
        for _ in range(PER_SOURCE):
            loris.open(src)
    t0 = time.monotonic()
    reopened = 0
    while time.monotonic() - t0 < ATTACK_S * mqdtest.SLOW:
        loris.step()
        # a persistent attacker: what was closed comes back, a few a step
        for src in SOURCES:
            have = sum(1 for st in loris.socks.values() if st[0] == src)
            for _ in range(min(PER_SOURCE - have, 2)):
                loris.open(src)
                reopened += 1
    # the ones mqd holds now must still go at their deadline, bytes or not
    t1 = time.monotonic()
    while loris.socks and time.monotonic() - t1 < (HDR_S + 10) * mqdtest.SLOW:
        loris.step()
    left = len(loris.socks)
    loris.close_all()
    prober.stop_flag = True
    prober.join(30 * mqdtest.SLOW)
    held = [life for _, life in loris.closed if life > 1.0]
    log("(a) %d slow connections opened, %d reopened; mqd held at most %d (per address %r); "
        "%d were held and closed after %.1f..%.1f s; %d left at the end; %d probes ok, %d failed"
        % (len(SOURCES) * PER_SOURCE, reopened, loris.most, loris.most_per_source, len(held),
           min(held or [0]), max(held or [0]), left, prober.ok, len(prober.failures)))
    check(left == 0, "%d slow connections still open %d s after the attack stopped reconnecting"
          % (left, HDR_S + 10))
    check(0 < loris.most <= MAX_CONSOLE, "mqd held %d slow console connections at once (max %d)"
          % (loris.most, MAX_CONSOLE))
    worst = max(loris.most_per_source.values())
    check(worst <= PER_IP, "one address held %d console connections (per address max %d): %r"
          % (worst, PER_IP, loris.most_per_source))
    check(held and max(held) < HDR_S + 6 * mqdtest.SLOW,
          "a trickling connection lived %.1f s (header deadline %d s)" % (max(held or [0]), HDR_S))
    check(not prober.failures, "AMQP clients failed during the attack: %r" % prober.failures[:3])
    check(prober.ok >= 10, "only %d AMQP round trips during the attack" % prober.ok)
    check(console_get(cport) == 200, "the console does not answer after the attack")
    text = b.log_text()
    refusals = text.count("console: refused")
    deadlines = text.count("not complete within")
    log("(a) log: %d console refusal lines, %d deadline lines" % (refusals, deadlines))
    check(refusals <= ATTACK_S * mqdtest.SLOW + 10 + HDR_S + 10,
          "%d console refusal lines (one a second at most)" % refusals)
    check(deadlines <= ATTACK_S * mqdtest.SLOW + 10 + HDR_S + 10,
          "%d console deadline lines (one a second at most)" % deadlines)


def case_descriptors(b, cport, prod):
    pid = b.pid
    soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    text0 = b.log_text()
    failed0 = len(re.findall(r"partition %s/\d+ failed \(Too many open files\)" % TOPIC, text0))
    accepted0 = len(prod.accepted)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (8, hard))
    log("(b) RLIMIT_NOFILE of mqd lowered from %d to 8 (%d descriptors open)"
        % (soft, len(os.listdir("/proc/%d/fd" % pid))))
    waiting = []
    try:
        for i in range(60):
            for port in (cport, b.port):
                s = socket.socket()
                s.bind(("127.0.2.%d" % (1 + i % 50), 0))
                s.setblocking(False)
                s.connect_ex(("127.0.0.1", port))
                waiting.append(s)
        time.sleep(1.0)
        c0, t0 = cpu_seconds(pid), time.monotonic()
        time.sleep(3.0)
        busy = (cpu_seconds(pid) - c0) / (time.monotonic() - t0)
        # the producer's partitions roll meanwhile: wait (bounded) for one to fail
        deadline = time.monotonic() + max(LOW_S - 4, 1) + 20 * mqdtest.SLOW
        while time.monotonic() < deadline:
            n = len(re.findall(r"partition %s/\d+ failed \(Too many open files\)" % TOPIC,
                               b.log_text()))
            if n > failed0:
                break
            time.sleep(0.2)
    finally:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
        for s in waiting:
            s.close()
    log("(b) limit restored to %d; mqd used %.0f%% CPU while short of descriptors" % (soft, busy * 100))
    text = b.log_text()
    failed = sorted(set(re.findall(r"partition %s/(\d+) failed \(Too many open files\)" % TOPIC, text)))
    log("(b) partitions failed for want of descriptors: %r" % failed)
    check(failed, "no partition of %s failed while descriptors were short (did none roll?)" % TOPIC)
    check(busy < 0.3, "mqd spins while accept() fails: %.0f%% CPU" % (busy * 100))
    # they resume by themselves: nobody runs mqctl topic resume
    deadline = time.monotonic() + 30 * mqdtest.SLOW
    while True:
        parts = describe(b)["partition_info"]
        if not any(p["failed"] for p in parts):
            break
        check(time.monotonic() < deadline, "partitions still failed 30 s after the limit came "
              "back: %r" % [(p.get("partition"), p.get("failed_reason")) for p in parts if p["failed"]])
        time.sleep(0.5)
    text = b.log_text()
    for p in failed:
        check(re.search(r"partition %s/%s resumed at offset" % (TOPIC, p), text),
              "no 'resumed' line for %s/%s" % (TOPIC, p))
    check(console_get(cport) == 200, "the console does not answer after the limit came back")
    # sends are accepted again
    deadline = time.monotonic() + 20 * mqdtest.SLOW
    n0 = len(prod.accepted)
    while len(prod.accepted) < n0 + 20:
        check(time.monotonic() < deadline, "sends to %s not accepted after the resume (%d new)"
              % (TOPIC, len(prod.accepted) - n0))
        time.sleep(0.2)
    text = b.log_text()
    console_accept = text.count("console: accept: ")
    amqp_accept = len(re.findall(r"conn: accept: ", text))
    log("(b) %d sends accepted before the limit dropped, %d rejected in all (%r); log: %d console "
        "accept lines, %d AMQP accept lines" % (accepted0, len(prod.rejected), prod.conditions,
                                                console_accept, amqp_accept))
    check(1 <= console_accept <= 3, "%d console accept-failure lines (want one per pause)"
          % console_accept)
    check("console: accepting again after" in text, "no 'accepting again' line from the console")
    check(amqp_accept <= LOW_S + 30 * mqdtest.SLOW, "%d AMQP accept lines (one a second at most)"
          % amqp_accept)
    check("Error from accept() call" not in text, "libevent logged accept() failures itself")
    check(prod.rejected, "no send was rejected while the partitions were failed")
    for c in prod.conditions:
        check(c.startswith("amqp:resource-limit-exceeded") and "Too many open files" in c,
              "a rejected send's condition: %s" % c)


def check_data(b, prod):
    got = mqdtest.receive(b.url, TOPIC, idle=3.0 * mqdtest.SLOW, timeout=120).bodies()
    dup = len(got) - len(set(got))
    have = set(got)
    missing = [x for x in prod.accepted if x not in have]
    stored_rejected = [x for x in prod.rejected if x in have]
    log("read back %d messages of %s: %d accepted, %d rejected, %d unknown outcomes"
        % (len(got), TOPIC, len(prod.accepted), len(prod.rejected), len(prod.unknown)))
    check(not missing, "%d accepted messages missing, first %r" % (len(missing), missing[:1]))
    check(dup == 0, "%d messages read twice" % dup)
    check(not stored_rejected, "%d rejected messages stored" % len(stored_rejected))
    extra = have - set(prod.accepted) - set(prod.unknown)
    check(not extra, "%d messages stored that were never accepted" % len(extra))
    for p in range(PARTS):
        d = os.path.join(b.data_dir, "topics", TOPIC, str(p))
        logs = [f for f in os.listdir(d) if f.endswith(".log")]
        check(len(logs) > 1, "partition %d never rolled a segment (%r)" % (p, logs))


def body(t):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    cport = mqdtest.free_port()
    conf = os.path.join(t.tmpdir, "mqd.conf")
    with open(conf, "w") as f:
        f.write("allow_anonymous = on\nconsole_listen = 127.0.0.1:%d\n"
                "console_max_connections = %d\nconsole_max_connections_per_ip = %d\n"
                "console_header_timeout_ms = %ds\nconsole_body_timeout_ms = %ds\n"
                "partition_resume_ms = 1s\n[topic %s]\npartitions = %d\nsegment_bytes = 16KiB\n"
                % (cport, MAX_CONSOLE, PER_IP, HDR_S, HDR_S, TOPIC, PARTS))
    b = t.broker(start=False, conf=conf)
    plain = b.argv
    b.argv = lambda: ["prlimit", "--nofile=%d" % NOFILE, "--"] + plain()
    b.start()
    mqdtest.wait_port(cport, 10 * mqdtest.SLOW, b.proc, "console")
    prod = Producer(b.url)
    prod.start()
    coll = mqdtest.Collect()
    with coll.case("(a) slow-loris console connections"):
        case_loris(b, cport)
    b.check_alive("after (a)")
    with coll.case("(b) descriptors short: pauses, failed partitions resume by themselves"):
        case_descriptors(b, cport, prod)
    b.check_alive("after (b)")
    prod.stop_flag = True
    prod.join(60 * mqdtest.SLOW)
    with coll.case("every accepted message, once; partitions rolled"):
        check(len(prod.accepted) > 200, "only %d messages accepted" % len(prod.accepted))
        check_data(b, prod)
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=300)
