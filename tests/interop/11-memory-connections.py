#!/usr/bin/python3
"""Connection churn does not leak: after a warm-up of 100 connections, 1,000 more
(10 at a time; each open, begin, attach a sender and a receiver, close) leave mqd's
VmRSS within +-5% (or 1 MiB, whichever is larger) of the level after the warm-up."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import Client, check, log, run_container  # noqa: E402

BATCH = 10


class Churn(Client):
    def __init__(self, url, total):
        super().__init__()
        self.url = url
        self.total = total
        self.started = 0
        self.finished = 0
        self.live = 0

    def on_start(self, event):
        self.container = event.container
        for _ in range(BATCH):
            self.open_one()

    def open_one(self):
        if self.started >= self.total:
            return
        self.started += 1
        self.live += 1
        conn = self.connect(self.container, self.url)
        conn.n_open = 0
        self.container.create_sender(conn, "churn")
        self.container.create_receiver(conn, "churn")

    def on_link_opened(self, event):
        c = event.connection
        c.n_open += 1
        if c.n_open == 2:
            c.close()

    def on_connection_closed(self, event):
        self.finished += 1
        self.live -= 1
        if self.finished == self.total:
            self.done = True
        else:
            self.open_one()

    def on_transport_closed(self, event):
        c = event.connection
        if c is not None and not (c.state & c.LOCAL_CLOSED):
            self.fail("connection %d lost before it was closed: %s" % (self.finished, event.transport.condition))

    def status(self):
        return "started %d, finished %d of %d" % (self.started, self.finished, self.total)


def churn(b, n):
    h = Churn(b.url, n)
    run_container(h, 120)
    check(h.finished == n, h.status())
    b.check_alive("during connection churn")
    time.sleep(1.0)  # let mqd finish tearing down


def built_with_asan(path):
    # ASan keeps freed memory in quarantine, so RSS says nothing about leaks there;
    # LeakSanitizer checks the same thing at exit in that build.
    with open(path, "rb") as f:
        return b"__asan_init" in f.read()


def body(t):
    if built_with_asan(mqdtest.mqd_bin()):
        mqdtest.skip("RSS is not meaningful under AddressSanitizer (LeakSanitizer covers leaks)")
    # heap_prefault off: a heap faulted in at start would hide up to 32 MiB of leaks
    b = t.broker(sets={"heap_prefault": "0"})
    rss0 = b.rss_kib()
    churn(b, 100)
    base = b.rss_kib()
    log("VmRSS: start %d KiB, after 100-connection warm-up %d KiB" % (rss0, base))
    samples = []
    for i in range(4):
        churn(b, 250)
        samples.append(b.rss_kib())
        log("after %d more connections: VmRSS %d KiB" % (250 * (i + 1), samples[-1]))
    allowed = max(base * 0.05, 1024)
    drift = samples[-1] - base
    check(abs(drift) <= allowed, "VmRSS moved %+d KiB (from %d to %d KiB) over 1,000 connections, allowed +-%d KiB;"
          " samples %s" % (drift, base, samples[-1], allowed, samples))


if __name__ == "__main__":
    mqdtest.main(body, timeout=300)
