#!/usr/bin/env python3
"""A consumer group's offsets that cannot be saved on a full disk (issue 32, point 7e):
mqd runs with its data dir on a 32 MiB tmpfs this test mounts (root only; 77 otherwise).
Topic gfull (1 partition) gets 20 messages; the disk is filled to the last byte; a
consumer of group g109 takes 10 of them, accepts them and detaches (the detach saves the
group's offsets, then the persist retries every second). Asserted:
  - mqd_group_offset_commit_failures_total (/metrics) goes from 0 to >= 1, and on to >= 2
    while the disk stays full (each retry counts);
  - the log has the line naming the group, the topic and the error ("persist of
    group=g109 topic=gfull: offsets not saved to meta.db: disk full"), once for the whole
    run of failures, not once a second;
  - once space is freed the next persist saves them ("group=g109 topic=gfull: offsets
    saved again after N failed attempts"), the counter does not go back, and after a
    SIGKILL and a restart g109's committed offset is 10 (before the fix the failed batch
    left the offsets marked saved: the group was gone after a restart)."""
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import check, log  # noqa: E402
from proton import Message  # noqa: E402

TOPIC = "gfull"
GROUP = "g109"
METRIC = "mqd_group_offset_commit_failures_total"


def failures(mport):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % mport, timeout=10) as r:
        text = r.read().decode()
    check("# TYPE %s counter" % METRIC in text, "%s is not a counter in /metrics" % METRIC)
    m = re.search(r"^%s (\d+)$" % METRIC, text, re.M)
    check(m, "no %s sample in /metrics" % METRIC)
    return int(m.group(1))


def wait_for(what, cond, timeout=30):
    deadline = time.monotonic() + timeout * mqdtest.SLOW
    while not cond():
        check(time.monotonic() < deadline, "%s: not within %ds" % (what, timeout))
        time.sleep(0.2)


def committed(b):
    rc, out, err = mqdtest.mqctl(b.url, "--json", "group", "describe", TOPIC, GROUP)
    check(rc == 0, "mqctl group describe %s %s: %d %s" % (TOPIC, GROUP, rc, err))
    return [p["committed"] for p in json.loads(out)["partitions"]]


def body(t):
    mnt = os.path.join(t.tmpdir, "disk")
    os.makedirs(mnt)
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", mnt],
                                           stderr=subprocess.PIPE).returncode != 0:
        mqdtest.skip("cannot mount a tmpfs (needs root)")
    b = None
    try:
        conf = os.path.join(t.tmpdir, "mqd.conf")
        with open(conf, "w") as f:
            f.write("allow_anonymous = on\ndisk_free_limit = 0\n")
        mport = mqdtest.free_port()
        b = t.broker(data_dir=os.path.join(mnt, "data"), conf=conf,
                     sets={"metrics_listen": "127.0.0.1:%d" % mport})
        rc, _, err = mqdtest.mqctl(b.url, "topic", "create", TOPIC, "--partitions", "1")
        check(rc == 0, "create %s: %s" % (TOPIC, err))
        mqdtest.send(b.url, TOPIC, [Message(id="m%d" % i, body="m%d" % i) for i in range(20)])
        check(failures(mport) == 0, "%s is %d before the disk filled" % (METRIC, failures(mport)))

        mqdtest.fill_disk(mnt, 0)
        r = mqdtest.receive(b.url, "%s/ConsumerGroups/%s" % (TOPIC, GROUP), count=10, credit=10,
                            timeout=30)
        check([m.body for m in r.got] == ["m%d" % i for i in range(10)],
              "g109 received %s" % [m.body for m in r.got])
        wait_for("%s >= 1" % METRIC, lambda: failures(mport) >= 1)
        wait_for("%s >= 2 (a retry)" % METRIC, lambda: failures(mport) >= 2)
        line = "persist of group=%s topic=%s: offsets not saved to meta.db: disk full" % (GROUP, TOPIC)
        text = b.log_text()
        check(text.count(line) == 1, "the log has %d lines %r (want 1 for the run of failures)"
              % (text.count(line), line))
        n_full = failures(mport)
        log("%s = %d while the disk is full" % (METRIC, n_full))

        os.unlink(os.path.join(mnt, "filler"))
        again = "group=%s topic=%s: offsets saved again after " % (GROUP, TOPIC)
        wait_for("the log line %r" % again, lambda: again in b.log_text())
        n_after = failures(mport)
        check(n_after >= n_full, "%s went back from %d to %d" % (METRIC, n_full, n_after))
        time.sleep(1.5 * mqdtest.SLOW)
        check(failures(mport) == n_after, "%s still moves after the save succeeded" % METRIC)

        b.restart(kill=True)
        got = committed(b)
        check(got == [10], "after the restart g109's committed offsets are %s, want [10]" % got)
    finally:
        if b is not None:
            b.stop()
        subprocess.run(["umount", mnt])


if __name__ == "__main__":
    mqdtest.main(body, timeout=180)
