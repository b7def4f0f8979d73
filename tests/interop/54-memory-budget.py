#!/usr/bin/python3
"""Per-connection memory budget (issue 16 point 3). One broker with heap_prefault=0 and
max_connection_memory=BUDGET_MIB; a bystander client does send/receive round trips on
its own connection throughout, and must never see an error nor wait longer than
BYSTANDER_MAX_S for one round trip. Cases:

- begin+end pipelined on channel 0, PIPELINED times, by a raw client that does not read
  until it has sent them all, then by one that reads all along: mqd's RSS stays under
  base + PIPE_RSS_MIB while they arrive (before: +500 MiB for 216,000, and only 64
  begins answered), and either every begin is answered (a begin and an end each: mqd
  frees each session once its end is written; what the reading client sees) or the
  connection is closed with amqp:resource-limit-exceeded (the one that does not read,
  once mqd's replies fill the socket); closing the socket leaves mqd responsive (a new
  connection opens within HANDSHAKE_MAX_S; before, freeing the sessions stalled the
  loop for many seconds) and RSS within SETTLE_MIB of where it was;
- PARTIAL_LINKS links each sending a PARTIAL_MIB MiB delivery in transfers with
  more=true that are never finished: the connection is closed with
  amqp:resource-limit-exceeded before mqd's RSS grows by more than
  PARTIAL_RSS_MIB (before: no close; the issue measured +481 MiB); after the
  socket closes RSS comes back within SETTLE_MIB of where it was;
- SESSIONS sessions x LINKS links attached on one connection: the connection is closed
  with amqp:resource-limit-exceeded before all are attached, RSS stays under base +
  LINKS_RSS_MIB, a handshake on another connection meanwhile takes less than
  HANDSHAKE_MAX_S, and after the close RSS is back within SETTLE_MIB;
- a consumer that grants credit for OUT_MSGS messages of OUT_MSG_KIB KiB and then reads
  nothing for 3 s: mqd's RSS grows by less than OUT_RSS_MIB (before: +127 MiB, every
  message copied into Proton's buffers at once); once it reads, all OUT_MSGS arrive;
- the same SESSIONS x LINKS attached properly on a broker with a large budget, then
  every link detached and every session ended (the connection stays open): RSS after
  the detach/end is within SETTLE_MIB (+5 %) of RSS before the attaches (before: +127 MiB
  that stayed), and again after the connection closes;
- a broker with max_memory=BROKER_MIB MiB: BROKER_LINKS attaches on one connection; those
  past the limit are refused with amqp:resource-limit-exceeded (the connection stays),
  a new connection is refused meanwhile and accepted once the big one has closed;
  mqd_connection_memory_bytes shows the charge, then 0; on the first broker
  mqd_connections_over_budget_total counts the closes.

Under AddressSanitizer RSS says nothing (quarantine, shadow memory): the RSS bounds are
skipped there and the cases run for their errors and frees (LeakSanitizer at exit)."""

import importlib.util
import os
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import check, log  # noqa: E402

from proton import Delivery, Endpoint, Message  # noqa: E402
from proton.utils import BlockingConnection  # noqa: E402

_here = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("hostile", os.path.join(_here, "50-hostile.py"))
hostile = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hostile)
bad_input = hostile.bad_input


class RawAmqp(hostile.RawAmqp):
    """50-hostile's raw client, whose writes wait for a slow broker (sanitizer build)
    instead of failing after the 0.1 s read timeout."""

    def _flush(self):
        deadline = time.monotonic() + 60 * mqdtest.SLOW
        while self.t.pending() > 0:
            out = self.t.peek(min(self.t.pending(), 1 << 20))
            try:
                n = self.sock.send(out)
            except socket.timeout:
                check(time.monotonic() < deadline, "mqd took none of our output for 60 s")
                continue
            except (BrokenPipeError, ConnectionResetError):
                self.closed_by_peer = self.closed_by_peer or "reset"
                self.t.close_head()
                return
            self.t.pop(n)

BUDGET_MIB = 64
PIPELINED = 300000
PIPE_RSS_MIB = 120
PARTIAL_LINKS = 30
PARTIAL_MIB = 15
PARTIAL_RSS_MIB = 2 * BUDGET_MIB + 32
SESSIONS = 64
LINKS = 1024
LINKS_RSS_MIB = 2 * BUDGET_MIB + 32
# what RSS may stay above its start once 65,536 links (peak ~175 MiB) are gone: malloc's
# fragmentation, not a leak (CI on a loaded machine: +8.1 MiB once with 8 here; a leak of
# 160 bytes per link, 10 MiB, still fails it)
SETTLE_MIB = 10
BROKER_MIB = 4
BROKER_LINKS = 3000
OUT_MSGS = 240
OUT_MSG_KIB = 256
OUT_RSS_MIB = 32  # measured +18..25 MiB here (copies in read-ahead, Proton, output), +127 MiB before
BYSTANDER_MAX_S = 5.0
HANDSHAKE_MAX_S = 5.0
LIMIT = "amqp:resource-limit-exceeded"


def built_with_asan(path):
    with open(path, "rb") as f:
        return b"__asan_init" in f.read()


ASAN = False


def rss_check(cond, msg):
    if ASAN:
        log("(ASan build, RSS bound not checked) " + msg)
        return
    check(cond, msg)


class TimedBystander(bad_input.Bystander):
    """10-bad-input's bystander, timing each round trip."""

    def __init__(self, url):
        super().__init__(url)
        self.worst = 0.0

    def run(self):
        from proton import Message
        try:
            conn = BlockingConnection(self.url, timeout=30 * mqdtest.SLOW)
            snd = conn.create_sender("bystander")
            rcv = conn.create_receiver("bystander", credit=10)
            deadline = time.monotonic() + 600
            while not self.stop_flag and time.monotonic() < deadline:
                t0 = time.monotonic()
                body = "round-%d" % self.rounds
                snd.send(Message(body=body))
                m = rcv.receive(timeout=30 * mqdtest.SLOW)
                if m.body != body:
                    raise Exception("bystander: got %r, want %r" % (m.body, body))
                rcv.accept()
                self.worst = max(self.worst, time.monotonic() - t0)
                self.rounds += 1
                time.sleep(0.01)
            conn.close()
        except Exception as e:
            self.error = "%s: %s" % (type(e).__name__, e)


def handshake_time(b):
    t0 = time.monotonic()
    c = BlockingConnection(b.url, timeout=60 * mqdtest.SLOW)
    dt = time.monotonic() - t0
    c.close()
    return dt


# ---------------------------------------------------------------- raw frames

def frame(body, channel=0, ftype=0):
    return struct.pack(">IBBH", 8 + len(body), 2, ftype, channel) + body


def described_list(code, fields):
    payload = bytes([len(fields)]) + b"".join(fields)
    if len(payload) < 256:
        return b"\x00\x53" + bytes([code]) + b"\xc0" + bytes([len(payload)]) + payload
    return b"\x00\x53" + bytes([code]) + b"\xd0" + struct.pack(">II", len(payload) + 4, len(fields)) + payload[1:]


def sym(s):
    return b"\xa3" + bytes([len(s)]) + s.encode()


def string(s):
    return b"\xa1" + bytes([len(s)]) + s.encode()


def uint(v):
    return b"\x70" + struct.pack(">I", v)


HEADERS = (b"AMQP\x03\x01\x00\x00" + frame(described_list(0x41, [sym("ANONYMOUS")]), ftype=1)
           + b"AMQP\x00\x01\x00\x00" + frame(described_list(0x10, [string("raw-54"), string("127.0.0.1"),
                                                                   uint(1 << 20)])))
BEGIN = frame(described_list(0x11, [b"\x40", uint(0), uint(1 << 20), uint(1 << 20)]))
END = frame(b"\x00\x53\x17\x45")


class FrameReader:
    """Splits what mqd sends into frames; counts performatives by descriptor code and
    keeps the error condition names carried by close frames (0x18)."""

    def __init__(self):
        self.buf = b""
        self.counts = {}
        self.close_conditions = []
        self.headers = 0

    def feed(self, data):
        buf = self.buf + data
        i = 0
        while True:
            if buf[i:i + 4] == b"AMQP":
                if len(buf) - i < 8:
                    break
                self.headers += 1
                i += 8
                continue
            if len(buf) - i < 8:
                break
            size, doff = struct.unpack_from(">IB", buf, i)
            if size < 8 or len(buf) - i < size:
                break
            body = buf[i + 4 * doff:i + size]
            i += size
            if len(body) >= 3 and body[0] == 0 and body[1] == 0x53:
                code = body[2]
                self.counts[code] = self.counts.get(code, 0) + 1
                if code == 0x18:
                    k = body.find(b"amqp:")
                    if k > 0:
                        n = body[k - 1]
                        self.close_conditions.append(body[k:k + n].decode("ascii", "replace"))
        self.buf = buf[i:]


def read_all(s, fr, timeout):
    """Reads until EOF or reset (True) or `timeout` (False)."""
    s.settimeout(0.2)
    deadline = time.monotonic() + timeout * mqdtest.SLOW
    while time.monotonic() < deadline:
        try:
            data = s.recv(1 << 20)
        except socket.timeout:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return True
        if not data:
            return True
        fr.feed(data)
    return False


def settle_rss(b, want_kib, slack_kib, timeout=15):
    """RSS once it is within slack of want (or the last sample after timeout)."""
    deadline = time.monotonic() + timeout * mqdtest.SLOW
    rss = b.rss_kib()
    while time.monotonic() < deadline and rss > want_kib + slack_kib:
        time.sleep(0.25)
        rss = b.rss_kib()
    return rss


# ---------------------------------------------------------------- cases

def case_pipelined_sessions(b, reading):
    base = b.rss_kib()
    s = socket.create_connection(("127.0.0.1", b.port), timeout=5)
    s.settimeout(None if not reading else 0.2)
    try:
        pipelined(b, s, base, reading)
    finally:
        s.close()
    t0 = time.monotonic()
    dt = handshake_time(b)
    log("pipelined: a new connection right after the close opened in %.2fs" % dt)
    check(dt < HANDSHAKE_MAX_S * mqdtest.SLOW, "a connection opened right after the close took %.1fs" % dt)
    rss = settle_rss(b, base, SETTLE_MIB * 1024)
    log("pipelined: RSS %d KiB %.1fs after the close" % (rss, time.monotonic() - t0))
    rss_check(rss <= base + SETTLE_MIB * 1024, "RSS %d KiB after the close, %d KiB before (allowed +%d MiB)"
              % (rss, base, SETTLE_MIB))


def pipelined(b, s, base, reading):
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
    s.sendall(HEADERS)
    state = {"sent": 0, "err": None}

    def writer():
        batch = (BEGIN + END) * 1000
        end = time.monotonic() + 120 * mqdtest.SLOW
        try:
            while state["sent"] < PIPELINED and time.monotonic() < end:
                view = memoryview(batch)
                while view and time.monotonic() < end:
                    try:
                        view = view[s.send(view):]
                    except socket.timeout:
                        continue
                state["sent"] += 1000
        except OSError as e:
            state["err"] = "%s" % e

    fr = FrameReader()
    rd = threading.Thread(target=lambda: state.update(eof=read_all(s, fr, 120)), daemon=True)
    if reading:
        rd.start()
    w = threading.Thread(target=writer, daemon=True)
    w.start()
    peak = base
    deadline = time.monotonic() + 120 * mqdtest.SLOW
    while w.is_alive() and time.monotonic() < deadline:
        peak = max(peak, b.rss_kib())
        if not ASAN and peak > base + 4 * PIPE_RSS_MIB * 1024:
            break  # the old code: stop feeding it before the machine suffers
        w.join(0.1)
    log("pipelined: sent %d begin+end pairs (%s); RSS %d -> peak %d KiB"
        % (state["sent"], state["err"] or "all written", base, peak))
    rss_check(peak <= base + PIPE_RSS_MIB * 1024,
              "RSS grew by %d KiB while %d begin+end pairs arrived (bound %d MiB)"
              % (peak - base, state["sent"], PIPE_RSS_MIB))
    w.join(120 * mqdtest.SLOW)
    if not reading:
        rd.start()
    try:
        s.shutdown(socket.SHUT_WR)  # mqd reads our input until this EOF after closing
    except OSError:
        pass
    rd.join(130 * mqdtest.SLOW)
    eof = state.get("eof")
    begins, ends = fr.counts.get(0x11, 0), fr.counts.get(0x17, 0)
    log("pipelined: mqd answered %d begins, %d ends, close %s, EOF %s"
        % (begins, ends, fr.close_conditions, eof))
    if LIMIT in fr.close_conditions:
        pass
    else:
        check(begins == state["sent"] == PIPELINED and ends == begins,
              "%d begins and %d ends answered for %d begin+end pairs, and no close with %s (closes: %s)"
              % (begins, ends, state["sent"], LIMIT, fr.close_conditions))


def case_partial_deliveries(b):
    base = b.rss_kib()
    r = RawAmqp(b.port)
    r.open()
    ssn = r.c.session()
    ssn.open()
    links = []
    for i in range(PARTIAL_LINKS):
        snd = ssn.sender("partial-%d" % i)
        snd.target.address = "mem-partial"
        snd.open()
        links.append(snd)
    r.pump(lambda: all(lk.credit > 0 for lk in links) or r.closed_by_peer, timeout=20)
    check(all(lk.credit > 0 for lk in links), "the %d senders got no credit" % PARTIAL_LINKS)
    chunk = b"\x00\x53\x75\xb0" + struct.pack(">I", PARTIAL_MIB << 20)  # data section header
    piece = os.urandom(64 << 10)
    dl = [lk.delivery("t%d" % i) for i, lk in enumerate(links)]
    for i, lk in enumerate(links):
        lk.stream(chunk)
    peak = base
    sent = 0
    deadline = time.monotonic() + 120 * mqdtest.SLOW
    done = False
    while not done and time.monotonic() < deadline:
        for lk in links:
            lk.stream(piece)
        sent += len(piece)
        r.pump(lambda: r.t.pending() < (1 << 20) or r.closed_by_peer, timeout=10)
        peak = max(peak, b.rss_kib())
        done = (r.closed_by_peer or r.c.state & Endpoint.REMOTE_CLOSED or sent >= (PARTIAL_MIB << 20) - 8
                or (not ASAN and peak > base + 4 * PARTIAL_RSS_MIB * 1024))
    # what is still in our transport goes out too (or the close comes)
    r.pump(lambda: r.closed_by_peer or r.c.state & Endpoint.REMOTE_CLOSED or r.t.pending() == 0, timeout=30)
    peak = max(peak, b.rss_kib())
    r.pump(lambda: r.closed_by_peer or r.c.state & Endpoint.REMOTE_CLOSED, timeout=10)
    cond = r.c.remote_condition
    log("partial: %d KiB sent on each of %d links, RSS %d -> peak %d KiB, closed: %s %s"
        % (sent >> 10, len(links), base, peak, r.closed_by_peer, cond))
    check(cond is not None and cond.name == LIMIT,
          "unfinished deliveries of %d x %d KiB: connection not closed with %s (got %s)"
          % (len(links), sent >> 10, LIMIT, cond))
    rss_check(peak <= base + PARTIAL_RSS_MIB * 1024, "RSS grew by %d KiB (bound %d MiB)"
              % (peak - base, PARTIAL_RSS_MIB))
    del dl
    r.sock.close()
    rss = settle_rss(b, base, SETTLE_MIB * 1024)
    rss_check(rss <= base + SETTLE_MIB * 1024, "RSS %d KiB after the close, %d KiB before (allowed +%d MiB)"
              % (rss, base, SETTLE_MIB))


def take_deliveries(lk):
    """Accepts every complete delivery on receiver lk; returns how many and their bytes."""
    n = size = 0
    while lk.current is not None:
        d = lk.current
        while True:
            chunk = lk.recv(1 << 20)
            if not chunk:
                break
            size += len(chunk)
        if d.partial:
            break
        d.update(Delivery.ACCEPTED)
        d.settle()
        lk.advance()
        n += 1
    return n, size


def case_slow_consumer(b):
    mqdtest.send(b.url, "mem-out", [Message(body=os.urandom(OUT_MSG_KIB << 10)) for _ in range(OUT_MSGS)],
                 timeout=120)
    time.sleep(0.5)
    base = b.rss_kib()
    r = RawAmqp(b.port)
    r.open()
    ssn = r.c.session()
    ssn.open()
    lk = ssn.receiver("slow")
    lk.source.address = "mem-out"
    lk.flow(OUT_MSGS)
    lk.open()
    r.pump(lambda: lk.state & Endpoint.REMOTE_ACTIVE or r.closed_by_peer, timeout=20)
    check(lk.state & Endpoint.REMOTE_ACTIVE, "slow consumer: no attach")
    # the peer reads nothing for a while: whatever mqd sends waits in mqd
    peak = base
    t_end = time.monotonic() + 3 * mqdtest.SLOW
    while time.monotonic() < t_end:
        peak = max(peak, b.rss_kib())
        time.sleep(0.1)
    log("slow consumer: %d x %d KiB waiting, credit %d, not read for 3 s: RSS %d -> peak %d KiB"
        % (OUT_MSGS, OUT_MSG_KIB, OUT_MSGS, base, peak))
    rss_check(peak <= base + OUT_RSS_MIB * 1024, "slow consumer: RSS grew by %d KiB while it read nothing (bound %d MiB;"
              " the messages total %d MiB)" % (peak - base, OUT_RSS_MIB, OUT_MSGS * OUT_MSG_KIB >> 10))
    got = [0, 0]

    def more():
        n, size = take_deliveries(lk)
        got[0] += n
        got[1] += size
        return got[0] >= OUT_MSGS or r.closed_by_peer

    r.pump(more, timeout=60)
    log("slow consumer: then read %d deliveries, %d KiB; connection %s" % (got[0], got[1] >> 10, r.c.remote_condition))
    check(got[0] == OUT_MSGS, "slow consumer: %d of %d messages arrived once it read (%s)"
          % (got[0], OUT_MSGS, r.c.remote_condition or r.closed_by_peer))
    r.c.close()
    r.pump(lambda: r.closed_by_peer or r.c.state & Endpoint.REMOTE_CLOSED, timeout=10)
    r.sock.close()


def attach_many(b, r, stop_on_close, probe=None):
    """Opens SESSIONS sessions of LINKS sender links each on raw client r; returns
    (sessions, links, peak RSS, worst handshake time of `probe` runs)."""
    sessions, links = [], []
    peak, worst = 0, 0.0
    for si in range(SESSIONS):
        ssn = r.c.session()
        ssn.open()
        sessions.append(ssn)
        for li in range(LINKS):
            lk = ssn.sender("s%d-l%d" % (si, li))
            lk.target.address = "mem-links"
            lk.open()
            links.append(lk)
            if li % 256 == 255:
                r.pump(lambda: r.t.pending() == 0 or r.closed_by_peer, timeout=10)
        r.pump(lambda: r.closed_by_peer or r.c.state & Endpoint.REMOTE_CLOSED or
               all(lk.state & Endpoint.REMOTE_ACTIVE for lk in links[-LINKS:]), timeout=30)
        peak = max(peak, b.rss_kib())
        if probe and si % 8 == 7:
            worst = max(worst, probe())
        if stop_on_close and (r.closed_by_peer or r.c.state & Endpoint.REMOTE_CLOSED):
            break
    return sessions, links, peak, worst


def case_many_links(b):
    base = b.rss_kib()
    r = RawAmqp(b.port)
    r.open()
    sessions, links, peak, worst = attach_many(b, r, True, probe=lambda: handshake_time(b))
    r.pump(lambda: r.closed_by_peer or r.c.state & Endpoint.REMOTE_CLOSED, timeout=10)
    cond = r.c.remote_condition
    attached = sum(1 for lk in links if lk.state & Endpoint.REMOTE_ACTIVE)
    log("links: %d attached of %d asked, %d sessions; RSS %d -> peak %d KiB; worst handshake %.2fs; close %s"
        % (attached, len(links), len(sessions), base, peak, worst, cond))
    check(cond is not None and cond.name == LIMIT,
          "%d links on %d sessions: connection not closed with %s (got %s)" % (len(links), len(sessions), LIMIT, cond))
    check(len(links) < SESSIONS * LINKS, "all %d links were attached within the budget" % len(links))
    check(worst < HANDSHAKE_MAX_S * mqdtest.SLOW, "a handshake took %.1fs meanwhile" % worst)
    rss_check(peak <= base + LINKS_RSS_MIB * 1024, "RSS grew by %d KiB (bound %d MiB)" % (peak - base, LINKS_RSS_MIB))
    r.sock.close()
    rss = settle_rss(b, base, SETTLE_MIB * 1024)
    rss_check(rss <= base + SETTLE_MIB * 1024, "RSS %d KiB after the close, %d KiB before (allowed +%d MiB)"
              % (rss, base, SETTLE_MIB))


def case_benign_churn(t):
    b = t.broker(name="churn", sets={"heap_prefault": "0", "max_connection_memory": "1GiB"})
    r = RawAmqp(b.port)
    r.open()
    base = b.rss_kib()
    sessions, links, peak, _ = attach_many(b, r, False)
    attached = sum(1 for lk in links if lk.state & Endpoint.REMOTE_ACTIVE)
    check(attached == SESSIONS * LINKS and not r.closed_by_peer,
          "benign: %d of %d links attached (%s)" % (attached, SESSIONS * LINKS, r.c.remote_condition))
    for i, lk in enumerate(links):
        lk.close()
        if i % 256 == 255:
            r.pump(lambda: r.t.pending() == 0, timeout=10)
    r.pump(lambda: all(lk.state & Endpoint.REMOTE_CLOSED for lk in links), timeout=60)
    for ssn in sessions:
        ssn.close()
    r.pump(lambda: all(s.state & Endpoint.REMOTE_CLOSED for s in sessions), timeout=60)
    check(all(lk.state & Endpoint.REMOTE_CLOSED for lk in links), "benign: not every detach was answered")
    check(all(s.state & Endpoint.REMOTE_CLOSED for s in sessions), "benign: not every end was answered")
    # the freed Proton objects of the client side (65,536 links) cost this process, not mqd
    for lk in links:
        lk.free()
    for ssn in sessions:
        ssn.free()
    r.pump(lambda: False, timeout=1)
    after = settle_rss(b, base, max(SETTLE_MIB * 1024, base // 20))
    log("benign: %d links on %d sessions; RSS before %d, peak %d, after detach+end %d KiB"
        % (attached, len(sessions), base, peak, after))
    rss_check(after <= base + max(SETTLE_MIB * 1024, base // 20),
              "benign: RSS %d KiB after every link was detached and every session ended, %d KiB before "
              "(peak %d KiB)" % (after, base, peak))
    r.c.close()
    r.pump(lambda: r.closed_by_peer or r.c.state & Endpoint.REMOTE_CLOSED, timeout=10)
    r.sock.close()
    closed = settle_rss(b, base, max(SETTLE_MIB * 1024, base // 20))
    log("benign: RSS after the connection closed %d KiB" % closed)
    rss_check(closed <= base + max(SETTLE_MIB * 1024, base // 20),
              "benign: RSS %d KiB after the connection closed, %d KiB before" % (closed, base))
    b.stop()


def metric(port, name):
    import urllib.request
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10 * mqdtest.SLOW) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    check(False, "metric %s missing" % name)


def case_broker_limit(t):
    mport = mqdtest.free_port()
    b = t.broker(name="small", sets={"heap_prefault": "0", "max_memory": "%dMiB" % BROKER_MIB,
                                     "metrics_listen": "127.0.0.1:%d" % mport})
    r = RawAmqp(b.port)
    r.open()
    links = []
    for i in range(BROKER_LINKS):
        if i % 1000 == 0:  # under max_links_per_session
            ssn = r.c.session()
            ssn.open()
        lk = ssn.sender("b%d" % i)
        lk.target.address = "mem-broker"
        lk.open()
        links.append(lk)
        if i % 256 == 255:
            r.pump(lambda: r.t.pending() == 0 or r.closed_by_peer, timeout=10)
    r.pump(lambda: r.closed_by_peer or all(lk.state & (Endpoint.REMOTE_ACTIVE | Endpoint.REMOTE_CLOSED)
                                           for lk in links), timeout=30)
    r.pump(lambda: False, timeout=0.5)  # a refusal is attach + detach: take both
    refused = [lk for lk in links if lk.state & Endpoint.REMOTE_CLOSED]
    conds = set("%s: %s" % (lk.remote_condition.name, lk.remote_condition.description)
                for lk in refused if lk.remote_condition)
    ok = len(links) - len(refused)
    log("max_memory %d MiB: %d links attached, %d refused (%s); connection %s"
        % (BROKER_MIB, ok, len(refused), sorted(conds), r.c.remote_condition or r.closed_by_peer or "open"))
    check(not r.closed_by_peer and r.c.remote_condition is None, "the connection was closed: %s"
          % (r.c.remote_condition or r.closed_by_peer))
    want = LIMIT + ": broker over max_memory"
    check(refused and conds == {want}, "over max_memory: %d links refused with %s, want %s"
          % (len(refused), sorted(conds), want))
    check(ok <= (BROKER_MIB << 20) // 2048, "%d links attached within max_memory %d MiB" % (ok, BROKER_MIB))
    held = metric(mport, "mqd_connection_memory_bytes")
    log("max_memory: mqd_connection_memory_bytes %d while the links are held" % held)
    check(held > BROKER_MIB << 20, "mqd_connection_memory_bytes %d, want > max_memory" % held)
    try:
        c = BlockingConnection(b.url, timeout=5 * mqdtest.SLOW)
        c.close()
        fail_msg = "a new connection was accepted while the broker was over max_memory"
    except Exception as e:
        fail_msg = None
        log("max_memory: a new connection was refused (%s)" % type(e).__name__)
    check(fail_msg is None, fail_msg or "")
    r.c.close()
    r.pump(lambda: r.closed_by_peer or r.c.state & Endpoint.REMOTE_CLOSED, timeout=10)
    r.sock.close()
    dt = None
    deadline = time.monotonic() + 10 * mqdtest.SLOW
    while dt is None and time.monotonic() < deadline:
        try:
            dt = handshake_time(b)
        except Exception:
            time.sleep(0.2)
    log("max_memory: after the close a new connection opened in %s s" % dt)
    check(dt is not None, "no connection accepted after the big one closed")
    left = metric(mport, "mqd_connection_memory_bytes")
    log("max_memory: mqd_connection_memory_bytes %d after the close" % left)
    check(left < 1 << 20, "mqd_connection_memory_bytes %d after the connection closed" % left)
    b.stop()


def body(t):
    global ASAN
    ASAN = built_with_asan(mqdtest.mqd_bin())
    mport = mqdtest.free_port()
    b = t.broker(sets={"heap_prefault": "0", "max_connection_memory": "%dMiB" % BUDGET_MIB,
                       "metrics_listen": "127.0.0.1:%d" % mport})
    by = TimedBystander(b.url)
    by.start()
    t0 = time.monotonic()
    while by.rounds < 3 and by.error is None and time.monotonic() - t0 < 30 * mqdtest.SLOW:
        time.sleep(0.05)
    check(by.error is None and by.rounds >= 3, "bystander did not get going: %s" % by.error)
    coll = mqdtest.Collect()
    cases = (("begin+end pipelined on channel 0, not read", lambda: case_pipelined_sessions(b, False)),
             ("begin+end pipelined on channel 0, read", lambda: case_pipelined_sessions(b, True)),
             ("unfinished multi-frame deliveries", lambda: case_partial_deliveries(b)),
             ("64 sessions x 1,024 links", lambda: case_many_links(b)),
             ("consumer that does not read", lambda: case_slow_consumer(b)))
    for name, fn in cases:
        with coll.case(name):
            before = by.rounds
            fn()
            b.check_alive("after case %s" % name)
            deadline = time.monotonic() + 30 * mqdtest.SLOW
            while by.rounds < before + 3 and by.error is None and time.monotonic() < deadline:
                time.sleep(0.05)
            check(by.error is None, "bystander failed during %s: %s" % (name, by.error))
            check(by.rounds >= before + 3, "bystander stalled after %s (%d rounds)" % (name, by.rounds - before))
            log("bystander: %d rounds so far, worst round trip %.2fs" % (by.rounds, by.worst))
            check(by.worst < BYSTANDER_MAX_S * mqdtest.SLOW,
                  "a bystander round trip took %.1fs (bound %.0fs)" % (by.worst, BYSTANDER_MAX_S))
    by.stop_flag = True
    by.join(30)
    with coll.case("metrics"):
        closes = metric(mport, "mqd_connections_over_budget_total")
        log("mqd_connections_over_budget_total %d" % closes)
        check(closes >= 2, "mqd_connections_over_budget_total %d, want at least 2 (partial deliveries, links)"
              % closes)
    with coll.case("benign 64 x 1,024 links attached, detached, ended"):
        case_benign_churn(t)
    with coll.case("broker over max_memory"):
        case_broker_limit(t)
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=900)
