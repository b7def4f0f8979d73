#!/usr/bin/python3
"""Issue 21 point 7 and the console producer/consumer.

counts    `topic describe` / `topic list` count messages, not offsets: two committed
          transactions leave two markers in partition 0, which hold offsets but are no
          messages; per group the backlog (messages it has yet to consume). The same
          figures after a restart (the in-memory counters of the old code started at 0),
          and after a further transaction and a SIGKILL.
dirsize   mqd_data_dir_size_bytes is the disk space the data dir's files take (as du
          counts it), not the size of the file system.
send      `mqctl send TOPIC BODY...` and bodies from stdin lines, with --key, --property,
          --partition and --body-json; --json reports sent/accepted/refused; a refused
          link exits 3 with the broker's condition.
receive   `mqctl receive TOPIC` browses (consumes nothing) from earliest; --from latest /
          OFFSET; --group G consumes: --count 2, then the rest, then nothing, with no
          duplicate and nothing lost; --json gives partition, offset, key, body,
          properties.
peek      `mqctl peek T/1 --count 2` is `topic peek` by another name: the same JSON and
          the same lines (the last two messages of partition 1), --group refused."""

import json
import os
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import BlockingTxns, Collect, check, free_port, log  # noqa: E402

from proton import Message  # noqa: E402
from proton.utils import BlockingConnection  # noqa: E402


def ctl(b, *args, stdin=None):
    argv = [mqdtest.mqctl_bin() or mqdtest.skip("mqctl not built"), "--url", b.url,
            "--timeout", str(10 * mqdtest.SLOW)] + list(args)
    p = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=60 * mqdtest.SLOW)
    log("mqctl %s -> %d %s" % (" ".join(args), p.returncode, p.stderr.strip()))
    return p.returncode, p.stdout, p.stderr


def ok_json(b, *args, stdin=None):
    rc, out, err = ctl(b, "--json", *args, stdin=stdin)
    check(rc == 0, "mqctl %s: exit %d: %s" % (" ".join(args), rc, err))
    return json.loads(out)


def commit_txn(url, address, bodies):
    c = BlockingConnection(url, timeout=20 * mqdtest.SLOW)
    bt = BlockingTxns(c)
    snd = c.create_sender(address)
    tid = bt.declare()
    ds = [bt.send(snd.link, Message(body=x), tid) for x in bodies]
    bt.wait_settled(ds)
    ok, state, cond = bt.discharge(tid)
    check(ok, "commit: %s %s" % (state, cond))
    c.close()


def backlog(d, group):
    got = [g.get("backlog") for g in d.get("groups", []) if g["group"] == group]
    check(len(got) == 1, "group %s in %r" % (group, d.get("groups")))
    return got[0]


def check_counts(b, when, txns=2):
    p0 = 6 + 3 * txns  # plain sends + transactional ones; a marker per transaction
    d = ok_json(b, "topic", "describe", "cnt")
    deadline = time.monotonic() + 30 * mqdtest.SLOW
    while not d.get("messages_exact", True) and time.monotonic() < deadline:
        time.sleep(0.1)  # the census of the log as opened runs between events
        d = ok_json(b, "topic", "describe", "cnt")
    check(d.get("messages_exact", True), "%s: counts still estimates" % when)
    per = [p.get("messages") for p in d["partition_info"]]
    ends = [p["end"] for p in d["partition_info"]]
    log("%s: messages %r per partition %r ends %r groups %r messages_in %r"
        % (when, d.get("messages"), per, ends, d.get("groups"), d.get("messages_in")))
    check(ends == [p0 + txns, 4], "%s: ends %r, want [%d, 4] (%d + %d markers, 4)"
          % (when, ends, p0 + txns, p0, txns))
    check(per == [p0, 4], "%s: messages per partition %r, want [%d, 4]" % (when, per, p0))
    check(d.get("messages") == p0 + 4, "%s: messages %r, want %d" % (when, d.get("messages"), p0 + 4))
    g = ok_json(b, "group", "describe", "cnt", "g1")
    g0 = [p for p in g["partitions"] if p["partition"] == 0][0]
    check(g0.get("backlog") == p0 - 5, "%s: g1 partition 0 backlog %r, want %d (%d - 5; lag %r)"
          % (when, g0.get("backlog"), p0 - 5, p0, g0["lag"]))
    lst = [x for x in ok_json(b, "topic", "list") if x["name"] == "cnt"]
    check(lst and lst[0].get("messages") == p0 + 4, "%s: topic list %r" % (when, lst))
    check(backlog(d, "$shared") == p0 + 4, "%s: $shared backlog %r" % (when, backlog(d, "$shared")))
    check(backlog(d, "g1") == g.get("backlog"), "%s: g1 backlog %r vs group describe %r"
          % (when, backlog(d, "g1"), g.get("backlog")))


def du(path):
    total = os.lstat(path).st_blocks * 512
    for root, dirs, files in os.walk(path):
        for n in dirs + files:
            try:
                total += os.lstat(os.path.join(root, n)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def metric(port, name):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10 * mqdtest.SLOW) as r:
        for ln in r.read().decode().split("\n"):
            if ln.startswith(name + " "):
                return int(float(ln.split()[1]))
    mqdtest.fail("no %s" % name)


def counts(t, b, coll, mport):
    with coll.case("counts: messages, not offsets; backlog per group"):
        ok_json(b, "topic", "create", "cnt", "--partitions", "2")
        mqdtest.send(b.url, "cnt/Partitions/0", [Message(body="p0-%d" % i) for i in range(6)])
        mqdtest.send(b.url, "cnt/Partitions/1", [Message(body="p1-%d" % i) for i in range(4)])
        for k in range(2):
            commit_txn(b.url, "cnt/Partitions/0", ["tx%d-%d" % (k, i) for i in range(3)])
        r = mqdtest.receive(b.url, "cnt/ConsumerGroups/g1/Partitions/0", count=5, credit=5,
                            timeout=30)
        check(len(r.got) == 5, "g1 received %d" % len(r.got))
        check_counts(b, "before the restart")
    with coll.case("dirsize: the data dir's files, not the file system"):
        got = metric(mport, "mqd_data_dir_size_bytes")
        want = du(b.data_dir)
        st = os.statvfs(b.data_dir)
        fs = st.f_blocks * st.f_frsize
        log("mqd_data_dir_size_bytes %d, du %d, file system %d" % (got, want, fs))
        check(abs(got - want) <= max(256 * 1024, want // 5),
              "mqd_data_dir_size_bytes %d, du says %d (file system %d)" % (got, want, fs))
        # mqctl status (and the console's overview, which reads the same READ)
        rc, out, err = mqdtest.mqctl(b.url, "--json", "status")
        st = json.loads(out) if rc == 0 else {}
        check(abs(st.get("data_dir_size_bytes", -1) - want) <= max(256 * 1024, want // 5),
              "mqctl status data_dir_size_bytes %r, du says %d" % (st.get("data_dir_size_bytes"), want))
    b.stop()
    b.start()
    with coll.case("counts: the same after a restart"):
        check_counts(b, "after the restart")
    with coll.case("counts: a transaction after the saved count, then a crash"):
        commit_txn(b.url, "cnt/Partitions/0", ["tx2-%d" % i for i in range(3)])
        check_counts(b, "after a third transaction", txns=3)
        b.restart(kill=True)  # no count saved at this stop: the census reads what follows the last
        check_counts(b, "after SIGKILL", txns=3)
    with coll.case("counts: a topic deleted and made again does not inherit the saved count"):
        ok_json(b, "topic", "create", "again")
        commit_txn(b.url, "again", ["t"])  # offsets 0 (message), 1 (marker)
        b.stop()
        b.start()  # the count of 'again' saved at this stop: a marker at 1
        ok_json(b, "topic", "delete", "again")
        ok_json(b, "topic", "create", "again")
        mqdtest.send(b.url, "again", [Message(body="m%d" % i) for i in range(2)])
        b.restart(kill=True)
        d = ok_json(b, "topic", "describe", "again")
        deadline = time.monotonic() + 30 * mqdtest.SLOW
        while not d.get("messages_exact", True) and time.monotonic() < deadline:
            time.sleep(0.1)
            d = ok_json(b, "topic", "describe", "again")
        check(d["partition_info"][0]["end"] == 2 and d.get("messages") == 2,
              "recreated topic: end %r messages %r, want 2 and 2"
              % (d["partition_info"][0]["end"], d.get("messages")))


def send_receive(b, coll):
    with coll.case("send: bodies from arguments, key and property"):
        ok_json(b, "topic", "create", "io", "--partitions", "2")
        r = ok_json(b, "send", "io", "a", "b", "c", "--key", "k", "--property", "colour=red")
        check((r["sent"], r["accepted"], r["refused"]) == (3, 3, []), "send: %r" % r)
        r = ok_json(b, "send", "io", "--partition", "1", stdin="l1\nl2\n")
        check((r["sent"], r["accepted"]) == (2, 2), "send from stdin: %r" % r)
        r = ok_json(b, "send", "io", "--partition", "0", "--body-json", '{"n": 1, "tags": ["x"]}')
        check(r["accepted"] == 1, "send --body-json: %r" % r)
    with coll.case("receive: browse from earliest consumes nothing"):
        for attempt in range(2):
            ms = ok_json(b, "receive", "io", "--idle", str(1.5 * mqdtest.SLOW))
            bodies = sorted(json.dumps(m["body"], sort_keys=True) for m in ms)
            want = sorted(json.dumps(x, sort_keys=True) for x in
                          ["a", "b", "c", "l1", "l2", {"n": 1, "tags": ["x"]}])
            check(bodies == want, "browse %d: bodies %r" % (attempt, bodies))
        keyed = [m for m in ms if m["body"] in ("a", "b", "c")]
        check(all(m["key"] == "k" and m["properties"] == {"colour": "red"} for m in keyed),
              "key/properties: %r" % keyed)
        check(len({m["partition"] for m in keyed}) == 1, "one key, partitions %r" % keyed)
        check([m["offset"] for m in keyed] == sorted(m["offset"] for m in keyed), "order %r" % keyed)
        lines = [m for m in ms if m["body"] in ("l1", "l2")]
        check([m["partition"] for m in lines] == [1, 1] and [m["body"] for m in lines] == ["l1", "l2"],
              "stdin lines: %r" % lines)
        rc, out, err = ctl(b, "receive", "io", "--count", "1", "--from", "earliest")
        check(rc == 0 and len(out.splitlines()) == 1, "human receive: %r" % out)
        first = min(ms, key=lambda m: (m["partition"], m["offset"]))
        check(out.startswith("%d/%d" % (first["partition"], first["offset"])) or "/" in out.split()[0],
              "human line %r" % out)
    with coll.case("peek: topic peek's other name, --group refused"):
        pk = ok_json(b, "peek", "io/1", "--count", "2")
        tp = ok_json(b, "topic", "peek", "io/1", "--count", "2")
        got = [bytes.fromhex(m["body_hex"]).decode() for m in pk["messages"]]
        log("peek io/1 --count 2: offsets %r bodies %r" % ([m["offset"] for m in pk["messages"]], got))
        check(got == ["l1", "l2"], "peek io/1 --count 2: bodies %r, want the last two of partition 1" % got)
        check(pk == tp, "peek and topic peek differ: %r / %r" % (pk, tp))
        offs = [m["offset"] for m in pk["messages"]]
        check(offs[1] == offs[0] + 1, "peek offsets %r" % offs)
        rc, out, err = ctl(b, "peek", "io/1", "--count", "2")
        rc2, out2, err2 = ctl(b, "topic", "peek", "io/1", "--count", "2")
        check(rc == rc2 == 0 and out == out2 and len(out.splitlines()) == 2 and out.splitlines()[1].endswith("\tl2"),
              "human peek %r / topic peek %r" % (out, out2))
        rc, out, err = ctl(b, "peek", "io", "--group", "g")
        check(rc == 1 and "--group" in err, "peek --group: exit %d %r" % (rc, err))
    with coll.case("receive: --from latest and --from OFFSET"):
        ms = ok_json(b, "receive", "io", "--from", "latest", "--idle", str(mqdtest.SLOW))
        check(ms == [], "--from latest: %r" % ms)
        ms = ok_json(b, "receive", "io", "--from", "1", "--idle", str(1.5 * mqdtest.SLOW))
        check(len(ms) == 6 - 2 and all(m["offset"] >= 1 for m in ms),
              "--from 1: %d messages %r" % (len(ms), [(m["partition"], m["offset"]) for m in ms]))
    with coll.case("receive --group consumes: 2, the rest, then nothing"):
        first = ok_json(b, "receive", "io", "--group", "g", "--count", "2")
        rest = ok_json(b, "receive", "io", "--group", "g", "--idle", str(1.5 * mqdtest.SLOW))
        none = ok_json(b, "receive", "io", "--group", "g", "--idle", str(mqdtest.SLOW))
        seen = [(m["partition"], m["offset"]) for m in first + rest]
        log("group g: %r then %r" % (seen[:2], seen[2:]))
        check(len(first) == 2 and len(rest) == 4 and none == [],
              "group g: %d, %d, %d" % (len(first), len(rest), len(none)))
        check(len(set(seen)) == 6, "duplicates: %r" % seen)
        g = ok_json(b, "group", "describe", "io", "g")
        check(g["backlog"] == 0, "group g backlog %r" % g["backlog"])
    with coll.case("send to an address the broker refuses"):
        rc, out, err = ctl(b, "--json", "send", "io/Partitions/7", "x")
        check(rc == 3 and "amqp:not-found" in err, "exit %d, stderr %r" % (rc, err))
        r = json.loads(out)
        check(r["accepted"] == 0, "refused send: %r" % r)


def body(t):
    mport = free_port()
    b = t.broker("cnt", sets={"metrics_listen": "127.0.0.1:%d" % mport})
    coll = Collect()
    counts(t, b, coll, mport)
    send_receive(b, coll)
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=240)
