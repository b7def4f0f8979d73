#!/usr/bin/python3
"""Management: mqctl round trips against a live mqd (create, describe, alter, group
reset on an idle group, delete; --json parsed; exit codes; aligned human tables with
nothing but the table on stdout), and the `$management` node driven by a plain
python3-qpid-proton request/response client (dynamic reply-to, and a receiver with
source $management and a fixed target as the Event Hubs SDKs attach it), including the
Event Hubs READ operations."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import Collect, check, send  # noqa: E402

from proton import Message  # noqa: E402
from proton.reactor import LinkOption  # noqa: E402
from proton.utils import BlockingConnection  # noqa: E402


class Ctl:
    def __init__(self, url):
        self.bin = mqdtest.mqctl_bin()
        if not self.bin:
            mqdtest.skip("mqctl not built (set MQCTL_BIN or MQD_BUILDDIR)")
        self.url = url

    def run(self, *args, json_out=False, url=None):
        return mqdtest.mqctl(url or self.url, *((["--json"] if json_out else []) + list(args)),
                             bin=self.bin)

    def json(self, *args):
        rc, out, err = self.run(*args, json_out=True)
        check(rc == 0, "mqctl %s: exit %d: %s" % (" ".join(args), rc, err))
        check(err == "", "mqctl %s wrote to stderr on success: %r" % (" ".join(args), err))
        return json.loads(out)


def column_starts(line):
    """Start positions of the columns of a header line (words separated by 2+ spaces)."""
    return [i for i, ch in enumerate(line) if ch != " " and (i == 0 or line[i - 2:i] == "  ")]


def check_table(text, header0, nrows):
    lines = text.rstrip("\n").split("\n")
    check(lines[0].startswith(header0), "table does not start with its header %r: %r" % (header0, lines[0]))
    check(len(lines) == nrows + 1, "want %d rows + header, got %d lines: %r" % (nrows, len(lines), text))
    starts = column_starts(lines[0])
    check(len(starts) >= 2, "header has no columns: %r" % lines[0])
    for ln in lines:
        check(ln == ln.rstrip(), "trailing blanks in %r" % ln)
        for s in starts:
            check(len(ln) > s and ln[s] != " " and (s == 0 or ln[s - 1] == " "),
                  "column at %d not aligned in %r (header %r)" % (s, ln, lines[0]))
    return lines


class FixedTarget(LinkOption):
    """The reply receiver's target address, as the Event Hubs SDKs attach it."""

    def __init__(self, address):
        self.address = address

    def apply(self, link):
        link.target.address = self.address


def mgmt_request(url, props, body=None, fixed_target=None):
    """One request over a plain Proton client; returns (application props, body, msg)."""
    c = BlockingConnection(url, timeout=10 * mqdtest.SLOW)
    try:
        if fixed_target:
            r = c.create_receiver("$management", name="eh-reply", options=FixedTarget(fixed_target))
            reply_to = fixed_target
        else:
            r = c.create_receiver(None, dynamic=True)
            reply_to = r.remote_source.address
        s = c.create_sender("$management")
        s.send(Message(id="req-42", reply_to=reply_to, properties=props, body=body))
        m = r.receive(timeout=10 * mqdtest.SLOW)
        r.accept()
        check(m.correlation_id == "req-42", "correlation-id %r, want the request's message-id" % m.correlation_id)
        check(m.address == reply_to, "reply `to` %r, want %r" % (m.address, reply_to))
        ap = {str(k): v for k, v in (m.properties or {}).items()}
        check(ap.get("statusCode") == ap.get("status-code"), "statusCode and status-code differ: %r" % ap)
        check(ap.get("statusDescription") == ap.get("status-description"), "descriptions differ: %r" % ap)
        return ap, m.body, m
    finally:
        c.close()


def mqctl_cases(coll, b, ctl):
    with coll.case("create/describe/alter with --json"):
        v = ctl.json("topic", "create", "orders", "--partitions", "3", "--config", "flush=async",
                     "--config", "retention_ms=3600000")
        check(v["name"] == "orders" and v["partitions"] == 3, "create reply %r" % v)
        check(v["overrides"] == {"flush": "async", "retention_ms": 3600000}, "overrides %r" % v["overrides"])
        check(v["config"]["flush"] == "async", "effective flush %r" % v["config"])
        v = ctl.json("topic", "describe", "orders")
        check(len(v["partition_info"]) == 3, "partition_info %r" % v["partition_info"])
        v = ctl.json("topic", "alter", "orders", "--partitions", "5", "--config", "segment_bytes=1048576")
        check(v["partitions"] == 5 and v["config"]["segment_bytes"] == 1048576, "alter reply %r" % v)
        check(v["config"]["flush"] == "async", "alter lost an earlier override: %r" % v["config"])
        names = [t["name"] for t in ctl.json("topic", "list")]
        check("orders" in names, "topic list %r" % names)
    with coll.case("exit codes"):
        rc, out, err = ctl.run("topic", "create", "orders")
        check(rc == 4 and out == "" and err.count("\n") == 1, "duplicate create: %d %r %r" % (rc, out, err))
        rc, out, err = ctl.run("topic", "describe", "nope")
        check(rc == 3 and out == "" and "nope" in err, "missing topic: %d %r %r" % (rc, out, err))
        rc, out, err = ctl.run("topic", "alter", "orders", "--partitions", "2")
        check(rc == 5 and out == "", "shrinking partitions: %d %r %r" % (rc, out, err))
        rc, out, err = ctl.run("topic", "frobnicate")
        check(rc == 1 and out == "", "unknown command: %d %r" % (rc, err))
        rc, out, err = ctl.run("status", url="amqp://127.0.0.1:%d" % mqdtest.free_port())
        check(rc == 2 and out == "" and err.count("\n") == 1, "no broker: %d %r %r" % (rc, out, err))
    with coll.case("group list/describe/reset on an idle group"):
        send(b.url, "orders", [Message(body="m%d" % i) for i in range(10)])
        groups = ctl.json("group", "list", "orders")
        # the queue ($shared) is listed only once a queue consumer used it (issue 38 point 3)
        check(not any(g["group"] == "$shared" for g in groups), "group list %r" % groups)
        v = ctl.json("group", "describe", "orders", "$shared")
        check(sum(p["lag"] for p in v["partitions"]) == 10, "lag before reset: %r" % v)
        v = ctl.json("group", "reset", "orders", "billing", "--to", "latest", "--create")
        check(all(p["committed"] == p["log_end"] for p in v["partitions"]), "reset latest: %r" % v)
        v = ctl.json("group", "reset", "orders", "billing", "--to", "earliest")
        check(v["lag"] == 10, "reset earliest: lag %r" % v)
    with coll.case("human tables are aligned, stdout holds only the table"):
        for name in ("a", "a-much-longer-topic-name", "mid_name"):
            ctl.json("topic", "create", name, "--partitions", "2")
        rc, out, err = ctl.run("topic", "list")
        check(rc == 0 and err == "", "topic list: %d %r" % (rc, err))
        check_table(out, "NAME", 4)
        rc, out, err = ctl.run("topic", "describe", "orders")
        table = out[out.index("PARTITION"):out.index("GROUP ")]
        check_table(table, "PARTITION", 5)
        check_table(out[out.index("GROUP "):], "GROUP", 2)  # $shared and billing
        rc, out, err = ctl.run("group", "describe", "orders", "$shared")
        check_table(out[out.index("PARTITION"):], "PARTITION", 5)
        rc, out, err = ctl.run("connection", "list")
        check_table(out, "ID", 1)
        rc, out, err = ctl.run("status")
        check(rc == 0 and "version" in out and "uptime_s" in out, "status: %r" % out)
    with coll.case("delete"):
        rc, out, err = ctl.run("topic", "delete", "mid_name")
        check(rc == 0 and out.strip() == "deleted topic mid_name", "delete: %d %r %r" % (rc, out, err))
        rc, _, _ = ctl.run("topic", "describe", "mid_name")
        check(rc == 3, "described a deleted topic: %d" % rc)
        check(ctl.json("topic", "delete", "a") == {"status": 204}, "delete --json")


def proton_cases(coll, b):
    with coll.case("plain Proton client: topic CREATE/READ, errors"):
        ap, body, _ = mgmt_request(b.url, {"operation": "CREATE", "type": "com.mqd:topic", "name": "hub"},
                                   {"partitions": 4})
        check(ap["statusCode"] == 201, "create: %r" % ap)
        check(body["partitions"] == 4, "create body %r" % body)
        ap, body, _ = mgmt_request(b.url, {"operation": "READ", "type": "com.mqd:topic", "name": "hub"})
        check(ap["statusCode"] == 200 and len(body["partition_info"]) == 4, "read: %r %r" % (ap, body))
        ap, body, _ = mgmt_request(b.url, {"operation": "FROB", "type": "com.mqd:topic", "name": "hub"})
        check(ap["statusCode"] == 501, "unknown operation: %r" % ap)
        ap, body, _ = mgmt_request(b.url, {"type": "com.mqd:topic"})
        check(ap["statusCode"] == 400, "no operation: %r" % ap)
        ap, body, _ = mgmt_request(b.url, {"operation": "QUERY", "type": "com.mqd:topic"})
        check(ap["statusCode"] == 200 and isinstance(body, list), "query: %r %r" % (ap, body))
    with coll.case("Event Hubs READ com.microsoft:eventhub"):
        ap, body, _ = mgmt_request(b.url, {"operation": "READ", "type": "com.microsoft:eventhub", "name": "hub"},
                                   fixed_target="eh-mgmt-reply")
        check(ap["statusCode"] == 200, "eventhub read: %r" % ap)
        body = {str(k): v for k, v in body.items()}
        check(body["name"] == "hub", "name %r" % body)
        check(type(body["partition_count"]).__name__ in ("int", "int32") and body["partition_count"] == 4,
              "partition_count %r (%s)" % (body["partition_count"], type(body["partition_count"])))
        check(list(body["partition_ids"]) == ["0", "1", "2", "3"], "partition_ids %r" % (body["partition_ids"],))
        check(type(body["created_at"]).__name__ == "timestamp", "created_at is %s" % type(body["created_at"]))
    with coll.case("Event Hubs READ com.microsoft:partition"):
        send(b.url, "hub/Partitions/1", [Message(body="e%d" % i) for i in range(3)])
        props = {"operation": "READ", "type": "com.microsoft:partition", "name": "hub", "partition": "1"}
        ap, body, _ = mgmt_request(b.url, props)
        check(ap["statusCode"] == 200, "partition read: %r" % ap)
        body = {str(k): v for k, v in body.items()}
        want = {"name": "hub", "partition": "1", "begin_sequence_number": 0,
                "last_enqueued_sequence_number": 2, "last_enqueued_offset": "2", "is_partition_empty": False}
        for k, v in want.items():
            check(body.get(k) == v and type(body.get(k)) is type(v), "%s = %r, want %r" % (k, body.get(k), v))
        check(type(body["last_enqueued_time_utc"]).__name__ == "timestamp" and body["last_enqueued_time_utc"] > 0,
              "last_enqueued_time_utc %r" % body["last_enqueued_time_utc"])
        props["partition"] = "0"
        ap, body, _ = mgmt_request(b.url, props)
        body = {str(k): v for k, v in body.items()}
        check(body["is_partition_empty"] is True and body["last_enqueued_sequence_number"] == -1,
              "empty partition: %r" % body)
        props["partition"] = "9"
        ap, body, _ = mgmt_request(b.url, props)
        check(ap["statusCode"] == 404, "partition 9: %r" % ap)


def body(t):
    b = t.broker(sets={"auto_create_topics": "on"})
    coll = Collect()
    mqctl_cases(coll, b, Ctl(b.url))
    proton_cases(coll, b)
    b.check_alive("after the management requests")
    coll.finish()


mqdtest.main(body, timeout=180)
