#!/usr/bin/python3
"""Issue 21 point 4: a [topic NAME] section declares its topic (like RabbitMQ's
definitions): it exists after start with the section's settings, also with
auto_create_topics = off; a changed section changes the topic at the next start
(partitions grow, never shrink); management overrides stay over the section; removing
the section deletes nothing (the topic, its partitions and its messages stay, with the
defaults' settings)."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import Collect, check, log  # noqa: E402

from proton import Message  # noqa: E402

DAY = 86400 * 1000


def write(path, sections):
    with open(path, "w") as f:
        f.write("auto_create_topics = off\n")
        f.write(sections)


def describe(b, name):
    rc, out, err = mqdtest.mqctl(b.url, "--json", "topic", "describe", name)
    check(rc == 0, "describe %s: exit %d %s" % (name, rc, err))
    return json.loads(out)


def names(b):
    rc, out, err = mqdtest.mqctl(b.url, "--json", "topic", "list")
    check(rc == 0, "topic list: %s" % err)
    return sorted(t["name"] for t in json.loads(out))


def stored(d):
    return sum(p["end"] - p["start"] for p in d["partition_info"])


def body(t):
    conf = os.path.join(t.tmpdir, "mqd.conf")
    write(conf, "[topic orders]\npartitions = 3\nretention_ms = 7d\ndead_letter = on\n"
                "[topic audit]\nflush = async\n")
    b = t.broker("decl", conf=conf)
    coll = Collect()
    with coll.case("declared topics exist at start with their settings"):
        check(names(b) == ["audit", "orders"], "topics %r" % names(b))
        d = describe(b, "orders")
        check(d["partitions"] == 3, "orders partitions %r" % d["partitions"])
        check(d["config"]["retention_ms"] == 7 * DAY, "retention_ms %r" % d["config"]["retention_ms"])
        check(d["config"]["dead_letter"] is True, "dead_letter %r" % d["config"]["dead_letter"])
        a = describe(b, "audit")
        check(a["partitions"] == 1 and a["config"]["flush"] == "async", "audit %r" % a)
        check("declared by [topic orders]" in b.log_text(), "no start log line for orders")
    with coll.case("a send to a declared topic is accepted, auto_create_topics = off"):
        mqdtest.send(b.url, "orders", [Message(body="m%d" % i) for i in range(5)])
        check(stored(describe(b, "orders")) == 5, "stored %d" % stored(describe(b, "orders")))
        s = mqdtest.Sender(b.url, "undeclared", [Message(body="x")])
        try:
            mqdtest.run_container(s, 20)
        except mqdtest.TestFailure as e:
            log("undeclared: %s" % e)
        cond = s.link_condition
        check(cond is not None and cond.name == "amqp:not-found", "undeclared: %r" % cond)
    with coll.case("a management override stays over the section"):
        rc, out, err = mqdtest.mqctl(b.url, "--json", "topic", "alter", "audit",
                                     "--config", "max_delivery_count=9")
        check(rc == 0, "alter: %s" % err)
    b.stop()
    write(conf, "[topic orders]\npartitions = 4\nretention_ms = 1d\ndead_letter = off\n"
                "[topic audit]\nflush = async\nmax_delivery_count = 3\n")
    b.start()
    with coll.case("a changed section changes the topic at the next start"):
        d = describe(b, "orders")
        check(d["partitions"] == 4, "partitions %r, want 4 (grown)" % d["partitions"])
        check(d["config"]["retention_ms"] == DAY, "retention_ms %r" % d["config"]["retention_ms"])
        check(d["config"]["dead_letter"] is False, "dead_letter %r" % d["config"]["dead_letter"])
        check(stored(d) == 5, "stored %d after the restart, want 5" % stored(d))
        a = describe(b, "audit")
        check(a["config"]["max_delivery_count"] == 9, "override lost: %r" % a["config"])
    b.stop()
    write(conf, "[topic orders]\npartitions = 2\n[topic audit]\n")
    b.start()
    with coll.case("fewer partitions in the section: the topic keeps its 4"):
        d = describe(b, "orders")
        check(d["partitions"] == 4, "partitions %r, want 4" % d["partitions"])
        check("partitions only grow" in b.log_text(), "no warning about the shrink")
    b.stop()
    write(conf, "")
    b.start()
    with coll.case("a removed section deletes nothing"):
        check(names(b) == ["audit", "orders"], "topics %r" % names(b))
        d = describe(b, "orders")
        check(d["partitions"] == 4 and stored(d) == 5, "partitions %r stored %d" % (d["partitions"], stored(d)))
        check(d["config"]["retention_ms"] != DAY and d["config"]["dead_letter"] is False,
              "settings not back to the defaults: %r" % d["config"])
        r = mqdtest.receive(b.url, "orders", count=5, timeout=30)
        got = sorted(m.body for m in r.got)
        check(got == ["m%d" % i for i in range(5)], "bodies %r" % got)
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=180)
