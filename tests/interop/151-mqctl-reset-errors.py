#!/usr/bin/python3
"""mqctl at parity with kafka-consumer-groups and rabbitmqctl (issue 38 point 5), each
checked by what it does to the broker (committed offsets, the next message a consumer of
the group gets, the groups that exist):

- group reset --shift-by -3 / +100 (clamped), --partitions 0,2 (partition 1 untouched),
  --to-datetime ISO (the first record at or after it, per partition), --by-duration
  (PT1H: every record; 1s after a pause: only the later ones), --dry-run (the preview's
  previous/new offsets, nothing changed), --all-groups (every group but $shared; refused
  as a whole, nothing moved, while one group has a live consumer);
- a reset of a group that does not exist is an error (exit 3) and creates nothing;
  --create makes it; a live member is a conflict (exit 4);
- errors: "no topic 'ordrs'" (not Azure's "messaging entity") with did-you-mean, the
  same for a group; did-you-mean for a misspelt command; a URL of another scheme is a
  usage error, not a host name; a monitor-only user's reset says "needs the manage right"
  and exits 7, a wrong password exits 6, no broker exits 2;
- issue 38 point 3: a topic nobody reads as a queue lists no $shared group and exports no
  mqd_group_lag for it; after a queue consumer took 2 of 6, $shared is listed as mode
  "queue" with lag 4, and its lag is exported."""

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import consoletest  # noqa: E402
import mqdtest  # noqa: E402
from mqdtest import SLOW, Collect, check, log  # noqa: E402

from proton import Message  # noqa: E402

T = "orders"


def ctl(b, *args, user="admin"):
    url = b.url.replace("amqp://", "amqp://%s:%s@" % (user, consoletest.PW[user])) if user else b.url
    return mqdtest.mqctl(url, *args)


def ok_json(b, *args, user="admin"):
    rc, out, err = ctl(b, "--json", *args, user=user)
    check(rc == 0, "mqctl %s: exit %d %s" % (" ".join(args), rc, err))
    return json.loads(out)


def committed(b, group):
    return [p["committed"] for p in ok_json(b, "group", "describe", T, group)["partitions"]]


def groups_of(b):
    return sorted(g["group"] for g in ok_json(b, "group", "list", T))


def send_round(b, tag, n=10):
    for p in range(3):
        mqdtest.send(b.url + "", "%s/Partitions/%d" % (T, p),
                     [Message(body="%s-%d-%d" % (tag, p, i)) for i in range(n)])


def first_body(b, group, partition):
    """The next message group gets from `partition` (consumes it: the caller resets)."""
    r = mqdtest.receive(b.url, "%s/ConsumerGroups/%s/Partitions/%d" % (T, group, partition), 1, credit=1)
    check(len(r.got) == 1, "%s/%d: got %d" % (group, partition, len(r.got)))
    return r.got[0].body


def case_shift_partitions(b):
    check(committed(b, "billing") == [20, 20, 20], "billing consumed all: %r" % committed(b, "billing"))
    v = ok_json(b, "group", "reset", T, "billing", "--shift-by", "-3", "--dry-run")
    check(v["dry_run"] is True and [(p["previous"], p["committed"]) for p in v["partitions"]] ==
          [(20, 17)] * 3, "dry run preview: %r" % v)
    check(committed(b, "billing") == [20, 20, 20], "the dry run changed %r" % committed(b, "billing"))
    rc, out, err = ctl(b, "group", "reset", T, "billing", "--shift-by", "-3", "--partitions", "0,2")
    check(rc == 0 and "PREVIOUS" in out and "NEW" in out, "human reset: %d %r %r" % (rc, out, err))
    check(committed(b, "billing") == [17, 20, 17], "after --shift-by -3 --partitions 0,2: %r"
          % committed(b, "billing"))
    check(first_body(b, "billing", 0) == "late-0-7", "billing's next on 0")
    v = ok_json(b, "group", "reset", T, "billing", "--shift-by", "100", "--partitions", "2")
    check([p["committed"] for p in v["partitions"]] == [18, 20, 20], "shift +100 clamps: %r" % v)
    log("--shift-by, --partitions, --dry-run: offsets %r" % committed(b, "billing"))


def case_datetime_duration(b, t_mid_ms):
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t_mid_ms // 1000)) + ".%03dZ" % (t_mid_ms % 1000)
    v = ok_json(b, "group", "reset", T, "billing", "--to-datetime", iso)
    check([p["committed"] for p in v["partitions"]] == [10, 10, 10], "--to-datetime %s: %r" % (iso, v))
    check(first_body(b, "billing", 1) == "late-1-0", "billing's next on 1 after --to-datetime")
    # the same instant with an offset instead of Z: +01:00 is one hour later in local terms
    local = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t_mid_ms // 1000 + 3600)) + ".%03d+01:00" % (t_mid_ms % 1000)
    v = ok_json(b, "group", "reset", T, "billing", "--to-datetime", local)
    check([p["committed"] for p in v["partitions"]] == [10, 10, 10], "--to-datetime %s: %r" % (local, v))
    v = ok_json(b, "group", "reset", T, "billing", "--by-duration", "PT1H")
    check([p["committed"] for p in v["partitions"]] == [0, 0, 0], "--by-duration PT1H: %r" % v)
    age = time.time() * 1000 - t_mid_ms  # between the rounds: the late round is younger
    v = ok_json(b, "group", "reset", T, "billing", "--by-duration", "%dms" % int(age))
    check([p["committed"] for p in v["partitions"]] == [10, 10, 10], "--by-duration %dms: %r" % (age, v))
    rc, out, err = ctl(b, "group", "reset", T, "billing", "--to-datetime", "yesterday")
    check(rc == 1 and "ISO 8601" in err, "bad datetime: %d %r" % (rc, err))
    rc, out, err = ctl(b, "group", "reset", T, "billing", "--to", "earliest", "--shift-by", "1")
    check(rc == 1 and "needs one of" in err, "two targets: %d %r" % (rc, err))
    log("--to-datetime (Z and +01:00) and --by-duration land on offset 10")


def case_missing_group(b):
    before = groups_of(b)
    rc, out, err = ctl(b, "group", "reset", T, "biling", "--to", "earliest")
    check(rc == 3 and "no group 'biling' on topic 'orders'" in err and "did you mean 'billing'" in err,
          "reset of a missing group: %d %r" % (rc, err))
    check(groups_of(b) == before, "the failed reset made a group: %r -> %r" % (before, groups_of(b)))
    v = ok_json(b, "group", "reset", T, "fresh", "--to", "latest", "--create")
    check([p["committed"] for p in v["partitions"]] == [20, 20, 20] and "fresh" in groups_of(b),
          "--create: %r, groups %r" % (v, groups_of(b)))
    log("missing group: exit 3, nothing made; --create makes it at latest")


def case_all_groups(b):
    ok_json(b, "group", "reset", T, "$shared", "--to", "latest")  # named: the queue moves
    shared = committed(b, "$shared")
    check(shared == [20, 20, 20], "$shared at latest: %r" % shared)
    v = ok_json(b, "group", "reset", T, "--all-groups", "--to", "earliest")
    check(sorted(x["group"] for x in v) == sorted(g for g in groups_of(b) if g != "$shared"),
          "--all-groups reset %r of %r" % ([x["group"] for x in v], groups_of(b)))
    check(committed(b, "billing") == [0, 0, 0] and committed(b, "fresh") == [0, 0, 0], "all at 0")
    check(committed(b, "$shared") == shared, "$shared moved: %r -> %r" % (shared, committed(b, "$shared")))
    held = subprocess.Popen([mqdtest.mqctl_bin(), "--url", b.url, "receive", T, "--group", "fresh",
                             "--from", "latest", "--count", "1000", "--idle", str(int(30 * SLOW))],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10 * SLOW
        while ok_json(b, "group", "describe", T, "fresh")["members"] != 1:
            check(time.monotonic() < deadline, "the consumer of fresh never attached")
            time.sleep(0.1)
        rc, out, err = ctl(b, "group", "reset", T, "--all-groups", "--to", "latest")
        check(rc == 4 and "live members" in err, "--all-groups with a live member: %d %r" % (rc, err))
        check(committed(b, "billing") == [0, 0, 0], "billing moved by a refused --all-groups")
        rc, out, err = ctl(b, "group", "reset", T, "fresh", "--to", "latest")
        check(rc == 4, "reset of a group with a member: %d %r" % (rc, err))
    finally:
        held.kill()
        held.wait()
    log("--all-groups: every group but $shared; refused whole while one has a member (exit 4)")


def case_queue_hidden(b, mport):
    """Issue 38 point 3: the queue pseudo-group $shared is not listed, and exports no lag,
    until a queue consumer used it; then it is listed with mode "queue"."""
    import urllib.request

    def lag_lines(topic):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % mport, timeout=10 * SLOW) as r:
            return [ln for ln in r.read().decode().splitlines()
                    if ln.startswith('mqd_group_lag{topic="%s",' % topic)]
    ok_json(b, "topic", "create", "quiet", "--partitions", "2")
    mqdtest.send(b.url, "quiet", [Message(body="q%d" % i) for i in range(6)])
    rows = ok_json(b, "group", "list", "quiet")
    check(rows == [], "group list of a topic nobody reads: %r" % rows)
    check(lag_lines("quiet") == [], "lag exported for nobody: %r" % lag_lines("quiet"))
    check(not [g for g in ok_json(b, "group", "list") if g["topic"] == "quiet"], "in the full list")
    r = mqdtest.receive(b.url, "quiet", 2, credit=2)  # a queue consumer takes 2
    check(len(r.got) == 2, "queue consumer got %d" % len(r.got))
    rows = ok_json(b, "group", "list", "quiet")
    check([(g["group"], g["mode"], g["lag"]) for g in rows] == [("$shared", "queue", 4)],
          "after a queue consumer: %r" % rows)
    lines = lag_lines("quiet")
    check(len(lines) == 2 and sum(int(float(ln.rsplit(" ", 1)[1])) for ln in lines) == 4,
          "lag exported after a queue consumer: %r" % lines)
    log("$shared hidden (list and lag) until a queue consumer used it, then mode queue, lag 4")


def case_errors(b):
    rc, out, err = ctl(b, "topic", "describe", "ordrs")
    check(rc == 3 and "no topic 'ordrs'" in err and "did you mean 'orders'" in err and
          "messaging entity" not in err, "describe ordrs: %d %r" % (rc, err))
    rc, out, err = ctl(b, "group", "describe", "ordrs", "billing")
    check(rc == 3 and "no topic 'ordrs'" in err, "group describe ordrs: %d %r" % (rc, err))
    for argv, want in ((["topic", "lst"], "did you mean 'topic list'"),
                       (["topc", "list"], "did you mean 'topic list'"),
                       (["grup", "describe"], "did you mean 'group describe'"),
                       (["stauts"], "did you mean 'status'")):
        rc, out, err = mqdtest.mqctl(b.url, *argv)
        check(rc == 1 and want in err, "mqctl %s: %d %r" % (" ".join(argv), rc, err))
    rc, out, err = mqdtest.mqctl("http://127.0.0.1:%d" % b.port, "status")
    check(rc == 1 and "scheme" in err, "http:// URL: %d %r" % (rc, err))
    rc, out, err = ctl(b, "group", "reset", T, "billing", "--to", "latest", user="viewer")
    check(rc == 7 and "needs the manage right" in err, "viewer's reset: %d %r" % (rc, err))
    check(committed(b, "billing") == [0, 0, 0], "the viewer's reset moved billing")
    rc, out, err = mqdtest.mqctl(b.url.replace("amqp://", "amqp://admin:wrong@"), "status")
    check(rc == 6, "wrong password: %d %r" % (rc, err))
    rc, out, err = mqdtest.mqctl("amqp://127.0.0.1:%d" % mqdtest.free_port(), "status")
    check(rc == 2, "no broker: %d %r" % (rc, err))
    log("errors: not found 3 with did-you-mean, usage 1, refused right 7, refused login 6, "
        "no broker 2")


def body(t):
    mport = mqdtest.free_port()
    b = consoletest.console_broker(t, extra="metrics_listen = 127.0.0.1:%d\n" % mport)
    rc, out, err = ctl(b, "topic", "create", T, "--partitions", "3")
    check(rc == 0, "create: %s" % err)
    send_round(b, "early")
    time.sleep(1.2 * SLOW)
    t_mid_ms = int(time.time() * 1000)
    time.sleep(1.2 * SLOW)
    send_round(b, "late")
    r = mqdtest.receive(b.url, T + "/ConsumerGroups/billing", 60)
    check(len(r.got) == 60, "billing consumed %d" % len(r.got))
    coll = Collect()
    with coll.case("--shift-by, --partitions, --dry-run"):
        case_shift_partitions(b)
    with coll.case("--to-datetime and --by-duration"):
        case_datetime_duration(b, t_mid_ms)
    with coll.case("a missing group is an error; --create"):
        case_missing_group(b)
    with coll.case("--all-groups"):
        case_all_groups(b)
    with coll.case("$shared only once a queue consumer used it"):
        case_queue_hidden(b, mport)
    with coll.case("error messages and exit codes"):
        case_errors(b)
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=300)
