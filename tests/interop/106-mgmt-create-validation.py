#!/usr/bin/python3
"""Issue 32 point 7(f): management CREATE and UPDATE take only names the address grammar
accepts and partition counts in 1..max_partitions_per_topic, and a name holding a NUL byte
never reaches a topic by its first part.

With max_partitions_per_topic = 8, over a plain Proton `$management` client:
- CREATE of "a\\0b" is 400 (description names the NUL) and neither `a` nor anything else
  is created (topic list and data directory); so are names outside the grammar ("a b",
  "a/b", "..", "$tmp.x", "$management", 256 bytes) and an empty name, each with a
  description naming the rule;
- CREATE with partitions 0, -1, 9, "2x" and 2.5 is 400 and creates nothing (0 made one
  partition before);
- CREATE x with 2 partitions is 201 (2), CREATE y without a count takes the default;
- UPDATE of x to 0, -1, 1 (shrinks) and 9 partitions is 400 and x keeps 2; to 3 it grows;
- READ, UPDATE and DELETE of "x\\0y" and a group RESET on "x\\0z" are 400 and x keeps its
  3 partitions and its 4 messages;
- the topic list is x and y at the end, and the audit log holds the 400s."""

import importlib.util
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import Collect, check, log  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "entity_auth", os.path.join(os.path.dirname(os.path.abspath(__file__)), "105-mgmt-entity-auth.py"))
entity_auth = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(entity_auth)
Mgmt, want, names = entity_auth.Mgmt, entity_auth.want, entity_auth.names

T_TOPIC, T_GROUP = "com.mqd:topic", "com.mqd:consumergroup"


def on_disk(b):
    d = os.path.join(b.data_dir, "topics")
    return sorted(n for n in os.listdir(d) if not n.startswith("$tmp")) if os.path.isdir(d) else []


def partitions(m, name):
    _, _, body = want(m.request("READ", T_TOPIC, name), 200, "READ " + name)
    return body["partitions"]


def body(t):
    b = t.broker("v", sets={"max_partitions_per_topic": "8", "default_partitions": "4"})
    m = Mgmt(b.url)
    coll = Collect()
    with coll.case("CREATE of a name holding a NUL byte"):
        _, desc, _ = want(m.request("CREATE", T_TOPIC, "a\x00b", {"partitions": 1}), 400, "CREATE a\\0b")
        check("NUL" in desc, "description %r" % desc)
        want(m.request("READ", T_TOPIC, "a"), 404, "READ a")
        check(names(m) == [] and on_disk(b) == [], "topics %r, on disk %r" % (names(m), on_disk(b)))
    with coll.case("CREATE of names outside the address grammar"):
        for name in ("a b", "a/b", "..", "$tmp.x", "$management", "x" * 256, "tab\there"):
            _, desc, _ = want(m.request("CREATE", T_TOPIC, name, {"partitions": 1}), 400,
                              "CREATE %r" % name[:20])
            check(desc.startswith("invalid topic name") and ("letters" in desc or "$tmp." in desc or
                                                              "255" in desc), "description %r" % desc)
        _, desc, _ = want(m.request("CREATE", T_TOPIC, "", {"partitions": 1}), 400, "CREATE ''")
        check("'name' is required" in desc, "description %r" % desc)
        check(names(m) == [] and on_disk(b) == [], "topics %r, on disk %r" % (names(m), on_disk(b)))
    with coll.case("CREATE with a partition count outside 1..8"):
        for n in (0, -1, 9, "2x", 2.5, "0"):
            _, desc, _ = want(m.request("CREATE", T_TOPIC, "x", {"partitions": n}), 400,
                              "CREATE x partitions %r" % (n,))
            check("partitions" in desc and ("1..8" in desc or "over the limit" in desc),
                  "description %r" % desc)
        want(m.request("CREATE", T_TOPIC, "x", None, partitions=0), 400, "partitions 0 as a property")
        check(names(m) == [] and on_disk(b) == [], "topics %r, on disk %r" % (names(m), on_disk(b)))
    with coll.case("CREATE with a valid count, and with none (the default)"):
        _, _, v = want(m.request("CREATE", T_TOPIC, "x", {"partitions": 2}), 201, "CREATE x 2")
        check(v["partitions"] == 2, "x %r" % v["partitions"])
        _, _, v = want(m.request("CREATE", T_TOPIC, "y"), 201, "CREATE y")
        check(v["partitions"] == 4, "y takes default_partitions: %r" % v["partitions"])
    with coll.case("UPDATE with a partition count outside 1..8 or below the current one"):
        for n in (0, -1, 1, 9, "abc"):
            want(m.request("UPDATE", T_TOPIC, "x", {"partitions": n}), 400, "UPDATE x partitions %r" % (n,))
        check(partitions(m, "x") == 2, "x after the refused updates: %r" % partitions(m, "x"))
        _, _, v = want(m.request("UPDATE", T_TOPIC, "x", {"partitions": 3}), 200, "UPDATE x 3")
        check(v["partitions"] == 3, "x grown: %r" % v["partitions"])
    with coll.case("READ, UPDATE, DELETE, group RESET of names holding a NUL byte"):
        m.send("x/Partitions/0", 4)
        want(m.request("READ", T_TOPIC, "x\x00y"), 400, "READ x\\0y")
        want(m.request("UPDATE", T_TOPIC, "x\x00y", {"partitions": 5}), 400, "UPDATE x\\0y")
        want(m.request("DELETE", T_TOPIC, "x\x00y"), 400, "DELETE x\\0y")
        want(m.request("RESET", T_GROUP, None, topic="x\x00z", group="g", to="earliest"), 400,
             "RESET x\\0z/g")
        want(m.request("DELETE", T_GROUP, "x/g\x00h"), 400, "group DELETE x/g\\0h")
        _, _, v = want(m.request("READ", T_TOPIC, "x"), 200, "READ x")
        check(v["partitions"] == 3 and v["messages"] == 4, "x after them: %r %r" % (v["partitions"], v["messages"]))
    with coll.case("what is left"):
        check(names(m) == ["x", "y"], "topics %r" % names(m))
        check(on_disk(b) == ["x", "y"], "on disk %r" % on_disk(b))
        text = b.log_text()
        check(text.count("op=CREATE type=com.mqd:topic") >= 17 and "status=400" in text,
              "the audit log lacks the refused creates")
    m.close()
    b.check_alive("after the refusals")
    log("every refusal answered 400 and changed nothing")
    coll.finish()


mqdtest.main(body, timeout=120)
