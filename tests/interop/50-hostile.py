#!/usr/bin/python3
"""Hostile clients (issue 6), while a well-behaved client on its own connection keeps
sending and receiving throughout and must never see an error:
- a frame far over the announced max-frame-size: the connection is closed with an error;
- nested-type bombs inside a transfer: 30,000 nested lists in application-properties,
  and the same in message-annotations; the message is refused (rejected, or the link or
  connection closed with an error), the broker does not recurse into it;
- 10,000 half-open TCP connections opened back to back (connect, then nothing or a
  partial protocol header); with handshake_timeout_ms=2000 mqd closes every one of them
  by itself (it accepts about 1,000 a second here, so a few thousand are pending at once;
  past max_handshakes_per_ip, 64 unfinished handshakes from 127.0.0.1, they are closed
  at accept), and a new client from another address (127.0.0.2) is served meanwhile;
- slowloris: 50 connections trickling a valid header and SASL frame one byte every
  300 ms are closed by the handshake timeout although bytes keep arriving;
- a flood of 3,000 attaches on one session (max_links_per_session=512): refused past
  the limit with an error, nothing else disturbed;
then the broker's RSS is under RSS_LIMIT_MIB (more under the sanitizers) and it exits 0
on SIGTERM (checked by mqdtest.main)."""

import importlib.util
import os
import resource
import select
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import check, log  # noqa: E402

from proton import Endpoint  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "bad_input", os.path.join(os.path.dirname(os.path.abspath(__file__)), "10-bad-input.py"))
bad_input = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bad_input)
Bystander, read_until_closed = bad_input.Bystander, bad_input.read_until_closed


class RawAmqp(bad_input.RawAmqp):
    """10-bad-input's raw client, taking input larger than the transport's capacity
    (thousands of attach replies arrive at once)."""

    def pump(self, until, timeout=5.0):
        self.sock.settimeout(0.1)
        deadline = time.monotonic() + timeout * mqdtest.SLOW
        while time.monotonic() < deadline:
            self._flush()
            if until():
                return True
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            except ConnectionResetError:
                data = b""
            if not data:
                self.closed_by_peer = self.closed_by_peer or "eof"
                self.t.close_tail()
                return until()
            while data:
                n = max(self.t.capacity(), 0)
                if n == 0:
                    self.closed_by_peer = "transport closed"
                    return until()
                self.t.push(data[:n])
                data = data[n:]
                self._flush()
        return until()

    def _flush(self):
        while self.t.pending() > 0:
            out = self.t.peek(self.t.pending())
            self.sock.sendall(out)
            self.t.pop(len(out))

HALF_OPEN = 10000
SLOW_CONNS = 50
ATTACHES = 3000
LINKS_PER_SESSION = 512
HANDSHAKE_MS = 2000
RSS_LIMIT_MIB = 200
RSS_LIMIT_SAN_MIB = 1024  # ASan shadow memory and quarantine


def raise_fd_limit(want):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        mqdtest.skip("need %d file descriptors, the hard limit allows %d" % (want, soft))


def nested_lists(depth):
    """list32 nested `depth` deep around an empty list, built from the inside out."""
    v = b"\x45"
    for _ in range(depth):
        v = b"\xd0" + struct.pack(">II", len(v) + 4, 1) + v
    return v


def bomb(section_code):
    """A message whose section `section_code` (0x72 message-annotations, 0x74
    application-properties) maps one key to 30,000 nested lists."""
    key = b"\xa3\x01k" if section_code == 0x72 else b"\xa1\x01k"
    inner = key + nested_lists(30000)
    m = b"\xd1" + struct.pack(">II", len(inner) + 4, 2) + inner
    return b"\x00\x53" + bytes([section_code]) + m + b"\x00\x53\x77\xa1\x04body"


def case_oversized_frame(b):
    r = RawAmqp(b.port)
    mfs = r.open()
    big = 8 * mfs
    try:
        r.send_raw(struct.pack(">IBBH", big, 2, 0, 0) + b"\x00" * (big - 8))
    except (BrokenPipeError, ConnectionResetError):
        pass
    got_close, cond = r.expect_close("amqp:connection:framing-error", "oversized frame")
    log("frame of %d bytes (max %d): close with %s" % (big, mfs, cond))


def send_bomb(b, section_code):
    r = RawAmqp(b.port)
    r.open()
    ssn = r.c.session()
    ssn.open()
    snd = ssn.sender("bomb-%x" % section_code)
    snd.target.address = "hostile-bomb"
    snd.open()
    check(r.pump(lambda: snd.credit > 0 or r.closed_by_peer), "bomb: no credit for the sender")
    dlv = snd.delivery("1")
    snd.send(bomb(section_code))
    snd.advance()
    refused = lambda: (dlv.remote_state or r.closed_by_peer or  # noqa: E731
                       snd.state & Endpoint.REMOTE_CLOSED or r.c.state & Endpoint.REMOTE_CLOSED)
    check(r.pump(refused, timeout=10), "bomb 0x%x: no outcome, detach or close within 10 s" % section_code)
    how = "outcome %s" % dlv.remote_state if dlv.remote_state else \
        "link closed: %s" % snd.remote_condition if snd.state & Endpoint.REMOTE_CLOSED else \
        "connection closed: %s" % (r.c.remote_condition or r.closed_by_peer)
    check(dlv.remote_state != dlv.ACCEPTED, "bomb 0x%x was accepted" % section_code)
    log("nested-list bomb in section 0x%x (%d bytes): %s" % (section_code, len(bomb(section_code)), how))
    r.sock.close()


def open_half_open(port, n):
    socks = []
    for i in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(("127.0.0.1", port))
        if i % 2:
            s.sendall(b"AMQP\x03")  # a partial protocol header, then silence
        s.setblocking(False)
        socks.append(s)
    return socks


def wait_all_closed(socks, timeout):
    """Waits until the peer closed every socket; returns how many are still open."""
    open_ = {s.fileno(): s for s in socks}
    poller = select.poll()
    for fd in open_:
        poller.register(fd, select.POLLIN)
    deadline = time.monotonic() + timeout * mqdtest.SLOW
    while open_ and time.monotonic() < deadline:
        for fd, _ in poller.poll(200):
            s = open_.get(fd)
            try:
                data = s.recv(4096)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                poller.unregister(fd)
                del open_[fd]
    return len(open_)


def case_half_open(b, by):
    t0 = time.monotonic()
    rounds0 = by.rounds
    socks = open_half_open(b.port, HALF_OPEN)
    log("%d half-open connections in %.1f s" % (len(socks), time.monotonic() - t0))
    # meanwhile a new, normal connection still gets served: from another address, as
    # 127.0.0.1 holds its max_handshakes_per_ip unfinished handshakes
    r = RawAmqp(b.port, source="127.0.0.2")
    r.open()
    r.sock.close()
    left = wait_all_closed(socks, HANDSHAKE_MS / 1000.0 + 30)
    for s in socks:
        s.close()
    check(left == 0, "%d of %d half-open connections were not closed by the handshake timeout"
          % (left, HALF_OPEN))
    check(by.rounds > rounds0, "the well-behaved client made no progress during the half-open flood")
    log("all %d closed by mqd after %.1f s; bystander did %d rounds meanwhile"
        % (HALF_OPEN, time.monotonic() - t0, by.rounds - rounds0))


def case_slowloris(b):
    hdr = b"AMQP\x03\x01\x00\x00"
    init = b"\x00\x53\x41\xc0\x0c\x01\xa3\x09ANONYMOUS"
    payload = hdr + struct.pack(">IBBH", 8 + len(init), 2, 1, 0) + init
    socks = [socket.create_connection(("127.0.0.1", b.port), timeout=5) for _ in range(SLOW_CONNS)]
    t0 = time.monotonic()
    closed = {}
    for i in range(len(payload)):  # ~13 s if nobody is closed
        for s in socks:
            if s in closed:
                continue
            try:
                s.sendall(payload[i:i + 1])
            except OSError:
                closed[s] = time.monotonic() - t0
        if len(closed) == len(socks):
            break
        time.sleep(0.3)
    for s in socks:
        if s not in closed:
            read_until_closed(s, timeout=3)
            closed[s] = time.monotonic() - t0
        s.close()
    worst = max(closed.values())
    check(worst < HANDSHAKE_MS / 1000.0 + 6 * mqdtest.SLOW,
          "a slow handshake survived %.1f s (handshake timeout %d ms)" % (worst, HANDSHAKE_MS))
    log("%d slowloris connections closed after at most %.1f s" % (SLOW_CONNS, worst))


def case_attach_flood(b):
    r = RawAmqp(b.port)
    r.open()
    ssn = r.c.session()
    ssn.open()
    links = []
    for i in range(ATTACHES):
        lk = ssn.receiver("flood-%d" % i)
        lk.source.address = "hostile-flood"
        lk.open()
        links.append(lk)
        if i % 200 == 199:
            r.pump(lambda: False, timeout=0.05)
            if r.closed_by_peer:
                break

    def settled():
        if r.closed_by_peer or r.c.state & Endpoint.REMOTE_CLOSED or ssn.state & Endpoint.REMOTE_CLOSED:
            return True
        return all(lk.state & (Endpoint.REMOTE_ACTIVE | Endpoint.REMOTE_CLOSED) for lk in links)

    r.pump(settled, timeout=20)
    r.pump(lambda: r.closed_by_peer, timeout=1)  # a refusal is attach + detach: take both
    active = sum(1 for lk in links if lk.state & Endpoint.REMOTE_ACTIVE and
                 not lk.state & Endpoint.REMOTE_CLOSED)
    cond = r.c.remote_condition or ssn.remote_condition or \
        next((lk.remote_condition for lk in links if lk.remote_condition), None)
    check(active <= LINKS_PER_SESSION, "%d links attached on one session (limit %d)"
          % (active, LINKS_PER_SESSION))
    check(cond is not None or r.closed_by_peer, "the flood past the link limit got no error")
    log("attach flood: %d of %d attaches answered, then %s" % (active, len(links), cond or r.closed_by_peer))
    r.sock.close()


def is_sanitized(pid):
    with open("/proc/%d/maps" % pid) as f:
        return "asan" in f.read()


def body(t):
    raise_fd_limit(HALF_OPEN + 1000)
    b = t.broker(sets={"max_connections": HALF_OPEN + 10000, "handshake_timeout_ms": HANDSHAKE_MS,
                       "max_links_per_session": LINKS_PER_SESSION})
    by = Bystander(b.url)
    by.start()
    t0 = time.monotonic()
    while by.rounds < 3 and by.error is None and time.monotonic() - t0 < 20:
        time.sleep(0.05)
    check(by.error is None and by.rounds >= 3, "bystander did not get going: %s" % by.error)
    coll = mqdtest.Collect()
    cases = (("oversized frame", lambda: case_oversized_frame(b)),
             ("bomb in application-properties", lambda: send_bomb(b, 0x74)),
             ("bomb in message-annotations", lambda: send_bomb(b, 0x72)),
             ("10,000 half-open connections", lambda: case_half_open(b, by)),
             ("slowloris handshakes", lambda: case_slowloris(b)),
             ("attach flood", lambda: case_attach_flood(b)))
    for name, fn in cases:
        with coll.case(name):
            fn()
        b.check_alive("after case %s" % name)
    before = by.rounds
    time.sleep(0.5)
    by.stop_flag = True
    by.join(30)
    with coll.case("well-behaved client throughout"):
        check(by.error is None, "the well-behaved client failed: %s" % by.error)
        check(by.rounds > before, "the well-behaved client stopped making progress")
        log("bystander completed %d round trips" % by.rounds)
    with coll.case("RSS bound"):
        limit = RSS_LIMIT_SAN_MIB if is_sanitized(b.pid) else RSS_LIMIT_MIB
        rss = b.rss_kib() / 1024.0
        check(rss < limit, "broker RSS %.0f MiB, over the bound of %d MiB" % (rss, limit))
        log("broker RSS %.0f MiB (bound %d MiB)" % (rss, limit))
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=200)
