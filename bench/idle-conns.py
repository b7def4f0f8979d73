#!/usr/bin/env python3
"""Opens N idle AMQP connections to a broker (loopback) and reports the broker's RSS.

Usage: bench/idle-conns.py --pid PID [--port 5672] [--n 10000]
Each connection completes the AMQP handshake (SASL ANONYMOUS, open) with a minimal
hand-written client, then stays idle. Prints RSS before/after and per connection.
Raise the fd limit first (ulimit -n 20000), and start mqd with --set heap_prefault=0 (a
heap faulted in at start hides the first 32 MiB of growth). Bounded: closes everything
at the end."""
import argparse, resource, selectors, socket, sys, time

SASL_HDR = b"AMQP\x03\x01\x00\x00"
AMQP_HDR = b"AMQP\x00\x01\x00\x00"


def frame(body, ftype):
    return (8 + len(body)).to_bytes(4, "big") + bytes([2, ftype, 0, 0]) + body


def sasl_init():
    mech = b"\xa3\x09ANONYMOUS"
    lst = mech
    body = b"\x00\x53\x41\xc0" + bytes([len(lst) + 1, 1]) + lst
    return frame(body, 1)


def amqp_open(i):
    cid = ("idle-%d" % i).encode()
    lst = b"\xa1" + bytes([len(cid)]) + cid
    # open: container-id, then idle-time-out absent (no heartbeats needed)
    body = b"\x00\x53\x10\xc0" + bytes([len(lst) + 1, 1]) + lst
    return frame(body, 0)


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--port", type=int, default=5672)
    ap.add_argument("--n", type=int, default=10000)
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < a.n + 100:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, a.n + 1000), hard))
    before = rss_kib(a.pid)
    socks = []
    t0 = time.time()
    for i in range(a.n):
        s = socket.create_connection(("127.0.0.1", a.port))
        s.sendall(SASL_HDR + sasl_init() + AMQP_HDR + amqp_open(i))
        socks.append(s)
    # wait until every connection got the broker's open (its reply bytes arrived)
    sel = selectors.DefaultSelector()
    for s in socks:
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
    got = {}
    deadline = time.time() + 60
    while len(got) < len(socks) and time.time() < deadline:
        for key, _ in sel.select(timeout=1):
            try:
                d = key.fileobj.recv(65536)
            except BlockingIOError:
                continue
            n = got.get(key.fileobj, b"") + d
            got[key.fileobj] = n
            if b"\x00\x53\x10" in n:  # the broker's open performative
                sel.unregister(key.fileobj)
    opened = sum(1 for v in got.values() if b"\x00\x53\x10" in v)
    time.sleep(2)
    after = rss_kib(a.pid)
    print("connections=%d opened=%d secs=%.1f rss_before_kib=%d rss_after_kib=%d per_conn_kib=%.1f"
          % (a.n, opened, time.time() - t0, before, after, (after - before) / max(1, opened)))
    for s in socks:
        s.close()


if __name__ == "__main__":
    sys.exit(main())
