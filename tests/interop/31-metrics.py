#!/usr/bin/python3
"""Metrics endpoint (metrics_listen): /metrics parses as Prometheus text exposition and
its counters move when messages flow; /healthz and /readyz answer."""

import os
import re
import sys
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import check, free_port, log, receive, send  # noqa: E402

from proton import Message  # noqa: E402

LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})? '
                  r'(-?[0-9.eE+-]+|\+Inf|NaN)$')


def get(port, path):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=10) as r:
            return r.status, r.read().decode(), r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), ""


def scrape(port):
    status, text, ctype = get(port, "/metrics")
    check(status == 200 and ctype.startswith("text/plain"), "/metrics: %d %r" % (status, ctype))
    samples, types = {}, {}
    for ln in text.split("\n"):
        if not ln:
            continue
        if ln.startswith("# TYPE "):
            _, _, name, typ = ln.split(" ")
            types[name] = typ
            continue
        if ln.startswith("#"):
            continue
        m = LINE.match(ln)
        check(m, "not a sample line: %r" % ln)
        samples[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return samples, types


def body(t):
    mport = free_port()
    b = t.broker(sets={"metrics_listen": "127.0.0.1:%d" % mport})
    check(get(mport, "/healthz")[:2] == (200, "ok\n"), "/healthz")
    check(get(mport, "/readyz")[0] == 200, "/readyz while serving")
    check(get(mport, "/nope")[0] == 404, "unknown path")
    s0, types = scrape(mport)
    for name, typ in (("mqd_connections", "gauge"), ("mqd_connections_accepted_total", "counter"),
                      ("mqd_topics", "gauge"), ("mqd_append_stable_seconds", "histogram"),
                      ("mqd_topic_messages_in_total", "counter"), ("mqd_group_lag", "gauge"),
                      ("process_resident_memory_bytes", "gauge"), ("mqd_data_dir_free_bytes", "gauge")):
        check(types.get(name) == typ, "%s: TYPE %r, want %s" % (name, types.get(name), typ))
    check(s0["process_resident_memory_bytes"] > 0, "rss")
    send(b.url, "m1", [Message(body="x" * 100) for _ in range(20)])
    s1, _ = scrape(mport)
    log("after send: %r" % {k: v for k, v in s1.items() if "m1" in k})
    check(s1['mqd_topic_messages_in_total{topic="m1"}'] == 20, "messages_in")
    check(s1['mqd_topic_bytes_in_total{topic="m1"}'] >= 2000, "bytes_in")
    check(s1['mqd_partition_log_end_offset{topic="m1",partition="0"}'] == 20, "log end")
    check(s1["mqd_topics"] == s0["mqd_topics"] + 1, "mqd_topics")
    check(s1["mqd_connections_accepted_total"] > s0["mqd_connections_accepted_total"], "accepted")
    check(s1['mqd_append_stable_seconds_count'] >= 20, "append->stable histogram count")
    check(s1['mqd_fsync_seconds_count'] > s0['mqd_fsync_seconds_count'], "fsync histogram count")
    check(s1['mqd_fsync_seconds_bucket{le="+Inf"}'] == s1['mqd_fsync_seconds_count'],
          "fsync +Inf bucket")
    check(s1['mqd_append_stable_seconds_bucket{le="+Inf"}'] == s1['mqd_append_stable_seconds_count'],
          "+Inf bucket = count")
    # the shared group exists once a consumer has attached: take 5, leave 15
    r = receive(b.url, "m1", count=5, credit=5)
    check(len(r.got) == 5, "received %d" % len(r.got))
    s2, _ = scrape(mport)
    check(s2.get('mqd_group_lag{topic="m1",group="$shared",partition="0"}') == 15,
          "lag after 5 of 20: %r" % s2.get('mqd_group_lag{topic="m1",group="$shared",partition="0"}'))
    r = receive(b.url, "m1", count=15)
    check(len(r.got) == 15, "received %d" % len(r.got))
    s2, _ = scrape(mport)
    check(s2['mqd_topic_messages_out_total{topic="m1"}'] >= 20, "messages_out did not move: %r"
          % s2['mqd_topic_messages_out_total{topic="m1"}'])
    check(s2['mqd_group_lag{topic="m1",group="$shared",partition="0"}'] == 0, "lag after receive")


mqdtest.main(body, timeout=120)
