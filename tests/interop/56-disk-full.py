#!/usr/bin/env python3
"""A full disk (issue 16, point 5). mqd runs with its data directory on a 32 MiB tmpfs
this test mounts (root only; 77 otherwise) and fills but for ~1 MiB; a producer then
sends 160 x 16 KiB unsettled. Asserted:
  - every send gets an outcome within a bound (count of outcomes == sends): accepted, or
    rejected with amqp:resource-limit-exceeded whose description says "disk full";
    before the fix the sends in flight when the write failed never settled;
  - nothing accepted is lost: a consumer reads exactly the accepted messages, in order,
    with their contents;
  - creating a topic on the full disk fails with "disk full" (not "not found"), through
    mqctl and through an auto-creating attach;
  - once space is freed the partition resumes without a restart (describe: failed
    false): the rejected sends, resent with their message-ids (dedup on), and 20 new ones
    are accepted and read back after the earlier ones, each stored once;
  - Event Hubs batches (message-format 0x80013700) likewise: each gets an outcome, and
    the rejected ones resent after the resume are stored once each (ehbatch-send.js);
  - with partition_resume_ms = 0 (reloaded) a partition failed again stays failed with
    space free until `mqctl topic resume full/0`, then takes sends again."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import check, log  # noqa: E402
from proton import Message  # noqa: E402

TOPIC = "full"
N = 160
SIZE = 16 * 1024
LEFT = 1 << 20  # free bytes left on the file system before the sends


Tracking = mqdtest.TrackingSender


class Attach(mqdtest.Client):
    """Attaches a sender to `address` and records the link error, if any."""

    def __init__(self, url, address):
        super().__init__()
        self.url, self.address = url, address
        self.cond = None

    def on_start(self, event):
        conn = self.connect(event.container, self.url)
        event.container.create_sender(conn, self.address)

    def on_link_opened(self, event):
        if event.link.remote_condition is None and event.link.remote_target.address:
            self.finish()

    def on_link_error(self, event):
        self.cond = event.link.remote_condition
        self.finish()


def describe(b, name):
    rc, out, err = mqdtest.mqctl(b.url, "--json", "topic", "describe", name)
    check(rc == 0, "describe %s: exit %d %s" % (name, rc, err))
    return json.loads(out)


def write_conf(path, resume):
    with open(path, "w") as f:
        f.write("allow_anonymous = on\ndisk_free_limit = 0\npartition_resume_ms = %s\n" % resume)


def send_batches(b, batches):
    """Event Hubs batches through the rhea helper: the outcomes, or None without node."""
    node = shutil.which("node")
    helper = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ehbatch-send.js")
    if not node:
        return None
    p = subprocess.run([node, helper, str(b.port), TOPIC], input=json.dumps(batches).encode(),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=90 * mqdtest.SLOW)
    if p.returncode == 77:
        return None
    check(p.returncode == 0, "batch helper: exit %d %s %s" % (p.returncode, p.stdout[-300:], p.stderr[-300:]))
    return json.loads(p.stdout.decode().strip().splitlines()[-1])


def batches_phase(b, mnt):
    """4b. Batched sends (message-format 0x80013700) fail the same way, and their inner
    message-ids leave the dedup window too: resent after the resume, every inner message
    is stored exactly once."""
    mqdtest.fill_disk(mnt, LEFT)
    batches = [[["b-%02d-%d" % (i, k), "b-%02d-%d-" % (i, k) + "z" * (SIZE // 2)] for k in range(4)]
               for i in range(40)]
    out = send_batches(b, batches)
    if out is None:
        log("node/rhea missing: batch phase skipped")
        os.unlink(os.path.join(mnt, "filler"))
        return
    ok = sorted(o["i"] for o in out if o["state"] == "accepted")
    bad = sorted(o["i"] for o in out if o["state"] != "accepted")
    log("batches: %d accepted, %d not" % (len(ok), len(bad)))
    check(len(out) == len(batches) and bad, "batch outcomes %d of %d, %d failed" % (len(out), len(batches), len(bad)))
    for o in out:
        check(o["state"] == "accepted" or (o["condition"] == "amqp:resource-limit-exceeded" and
                                           "disk full" in (o["description"] or "")), "batch outcome %r" % o)
    os.unlink(os.path.join(mnt, "filler"))
    deadline = time.monotonic() + 30 * mqdtest.SLOW
    while describe(b, TOPIC)["partition_info"][0]["failed"]:
        check(time.monotonic() < deadline, "the partition did not resume within 30 s (batches)")
        time.sleep(0.5)
    again = send_batches(b, [batches[i] for i in bad])
    check(all(o["state"] == "accepted" for o in again), "resent batches: %r" % again[:3])
    want = sorted(body for bt in batches for _, body in bt)
    r = mqdtest.receive(b.url, TOPIC, count=len(want), linger=1.0, timeout=60)
    got = sorted(m.body for m in r.got)
    check(got == want, "batches read back: %d messages, %d distinct, want %d" % (
        len(got), len(set(got)), len(want)))


def body(t):
    mnt = os.path.join(t.tmpdir, "disk")
    os.makedirs(mnt)
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", mnt],
                                           stderr=subprocess.PIPE).returncode != 0:
        mqdtest.skip("cannot mount a tmpfs (needs root)")
    brokers = []
    try:
        data = os.path.join(mnt, "data")
        conf = os.path.join(t.tmpdir, "mqd.conf")
        write_conf(conf, "1s")
        b = t.broker(data_dir=data, conf=conf)
        brokers.append(b)
        rc, _, err = mqdtest.mqctl(b.url, "topic", "create", TOPIC, "--partitions", "1",
                                   "--config", "dedup_window_ms=600000")
        check(rc == 0, "create %s: %s" % (TOPIC, err))
        mqdtest.send(b.url, TOPIC, [Message(body="warm-%d" % i) for i in range(5)])
        mqdtest.fill_disk(mnt, LEFT)

        # 1. every send gets an outcome within the bound
        msgs = [Message(id="id-%03d" % i, body="m%03d-" % i + "x" * SIZE) for i in range(N)]
        s = Tracking(b.url, TOPIC, msgs)
        t0 = time.monotonic()
        mqdtest.run_container(s, 60)
        log("outcomes in %.1fs: accepted %d, other %d" % (time.monotonic() - t0, s.accepted,
                                                            len(s.outcomes)))
        check(s.accepted + len(s.outcomes) == N, "outcomes %d of %d sends" % (s.accepted + len(s.outcomes), N))
        check(s.accepted * SIZE < LEFT + SIZE, "%d accepted: more than the free space holds" % s.accepted)
        check(len(s.outcomes) > 0, "every send was accepted: the disk never filled")
        for idx, state, cond in s.outcomes:
            check(cond is not None and cond.name == "amqp:resource-limit-exceeded" and
                  "disk full" in (cond.description or ""),
                  "send %s: outcome %s condition %s" % (idx, state, cond))
        check(sorted(s.ok) == list(range(s.accepted)), "accepted sends are not a prefix: %r" % s.ok[:20])

        # 2. nothing accepted is lost
        r = mqdtest.receive(b.url, TOPIC, count=5 + s.accepted, linger=1.0, timeout=60)
        bodies = [m.body for m in r.got]
        want = ["warm-%d" % i for i in range(5)] + [msgs[i].body for i in range(s.accepted)]
        check(bodies == want, "read back %d messages, want %d (first differing at %s)" % (
            len(bodies), len(want), next((i for i, (x, y) in enumerate(zip(bodies, want)) if x != y), "-")))
        d = describe(b, TOPIC)
        p0 = d["partition_info"][0]
        check(p0["failed"] is True and "disk full" in p0["failed_reason"],
              "describe while full: %r" % p0)

        # 3. a topic created on the full disk: "disk full", not "not found"
        rc, _, err = mqdtest.mqctl(b.url, "topic", "create", "newtopic", "--partitions", "4")
        check(rc != 0 and "disk full" in err, "create on a full disk: exit %d, %r" % (rc, err))
        a = Attach(b.url, "autotopic")
        mqdtest.run_container(a, 30)
        check(a.cond is not None and a.cond.name == "amqp:resource-limit-exceeded" and
              "disk full" in (a.cond.description or ""), "auto-create attach on a full disk: %s" % a.cond)

        # 4. free the space: the partition resumes by itself (probe every 1 s)
        os.unlink(os.path.join(mnt, "filler"))
        deadline = time.monotonic() + 30 * mqdtest.SLOW
        while describe(b, TOPIC)["partition_info"][0]["failed"]:
            check(time.monotonic() < deadline, "the partition did not resume within 30 s")
            time.sleep(0.5)
        # the rejected sends, sent again with their message-ids (dedup is on), are stored
        # once each: a rejection must not leave its id in the dedup window
        rejected = sorted(idx for idx, _, _ in s.outcomes)
        more = [msgs[i] for i in rejected] + [Message(body="after-%d" % i) for i in range(20)]
        mqdtest.send(b.url, TOPIC, more)
        r = mqdtest.receive(b.url, TOPIC, count=len(more), linger=1.0, timeout=60)
        got = [m.body for m in r.got]
        check(got == [m.body for m in more], "after the resume read %d of %d (first %r)" % (
            len(got), len(more), [g[:8] for g in got[:3]]))
        d = describe(b, TOPIC)["partition_info"][0]
        check(d["end"] == 5 + N + 20, "end offset %d, want %d" % (d["end"], 5 + N + 20))
        b.check_alive("after the resume")
        batches_phase(b, mnt)

        # 5. manual resume: partition_resume_ms = 0 (SIGHUP), fill, fail, free: the
        # partition stays failed until `mqctl topic resume full/0`
        write_conf(conf, "0")
        os.kill(b.pid, signal.SIGHUP)
        time.sleep(0.5 * mqdtest.SLOW)
        mqdtest.fill_disk(mnt, LEFT)
        s2 = Tracking(b.url, TOPIC, [Message(body="n%03d-" % i + "y" * SIZE) for i in range(N)])
        mqdtest.run_container(s2, 60)
        check(s2.accepted + len(s2.outcomes) == N and s2.outcomes,
              "second fill: %d accepted, %d other of %d" % (s2.accepted, len(s2.outcomes), N))
        os.unlink(os.path.join(mnt, "filler"))
        time.sleep(3 * mqdtest.SLOW)
        check(describe(b, TOPIC)["partition_info"][0]["failed"],
              "resumed by itself with partition_resume_ms = 0")
        rc, _, err = mqdtest.mqctl(b.url, "topic", "resume", TOPIC + "/0")
        check(rc == 0, "mqctl topic resume: exit %d %s" % (rc, err))
        deadline = time.monotonic() + 30 * mqdtest.SLOW
        while describe(b, TOPIC)["partition_info"][0]["failed"]:
            check(time.monotonic() < deadline, "mqctl topic resume did not resume it within 30 s")
            time.sleep(0.5)
        mqdtest.send(b.url, TOPIC, [Message(body="manual-%d" % i) for i in range(5)])
        r = mqdtest.receive(b.url, TOPIC, count=s2.accepted + 5, linger=1.0, timeout=60)
        check(len(r.got) == s2.accepted + 5 and [m.body for m in r.got[-5:]] ==
              ["manual-%d" % i for i in range(5)], "after mqctl resume read %d" % len(r.got))
    finally:
        for b in brokers:
            b.stop()
        subprocess.run(["umount", mnt])


if __name__ == "__main__":
    mqdtest.main(body, timeout=240)
