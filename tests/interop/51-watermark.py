#!/usr/bin/env python3
"""A producer outrunning the disk (issue 6, limits): with free disk below
disk_free_limit, sending links get no new credit while consumers keep flowing; once the
limit is lifted (SIGHUP reload) the credit comes back and nothing was lost."""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import check, log  # noqa: E402
from proton import Message, Timeout  # noqa: E402
from proton.utils import BlockingConnection  # noqa: E402

TOPIC = "wm"


def write_conf(path, limit):
    with open(path, "w") as f:
        f.write("allow_anonymous = on\ndisk_free_limit = %s\n" % limit)


def reload(b, path, limit):
    write_conf(path, limit)
    os.kill(b.pid, signal.SIGHUP)
    time.sleep(0.5 * mqdtest.SLOW)  # the watermark is measured every 100 ms


def body(t):
    conf = os.path.join(t.tmpdir, "mqd.conf")
    write_conf(conf, "0")
    b = t.broker(conf=conf)
    mqdtest.send(b.url, TOPIC, [Message(body="before-%d" % i) for i in range(10)])

    # 1 TiB free is more than this disk has: the broker must stop giving producers credit
    reload(b, conf, "1TiB")
    c = BlockingConnection(b.url, timeout=30)
    s = c.create_sender(TOPIC)
    blocked = False
    try:
        s.send(Message(body="while-blocked"), timeout=3 * mqdtest.SLOW)
    except Timeout:
        blocked = True
    check(blocked, "a send was accepted while free disk was below disk_free_limit")
    log("producer blocked as expected")

    # consumers keep flowing while producers wait
    r = c.create_receiver(TOPIC)
    got = []
    for _ in range(10):
        m = r.receive(timeout=10 * mqdtest.SLOW)
        got.append(m.body)
        r.accept()
    check(got == ["before-%d" % i for i in range(10)], "consumer while blocked got %r" % got)

    # lift the limit: credit comes back (periodic refill) and the waiting send goes out
    reload(b, conf, "0")
    s.send(Message(body="after"), timeout=15 * mqdtest.SLOW)
    rest = []
    for _ in range(2):
        m = r.receive(timeout=10 * mqdtest.SLOW)
        rest.append(m.body)
        r.accept()
    check(sorted(rest) == ["after", "while-blocked"], "after unblocking got %r" % rest)
    c.close()
    with open(b.logs[-1]) as f:
        text = f.read()
    check("watermark" in text, "the broker logged nothing about the watermark")


if __name__ == "__main__":
    mqdtest.main(body, timeout=120)
