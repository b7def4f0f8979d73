#!/usr/bin/python3
"""Issue 21 point 5: an ACL that gives a user send/receive on a pattern but no `create`
right answers an attach (or an anonymous-relay send) naming a topic that does not exist
yet with amqp:unauthorized-access naming the missing right, not amqp:not-found; nothing
is created. A user with the right creates it; an existing topic still works for the
first user; with auto_create_topics = off a missing topic is amqp:not-found (nobody
could create it on first use)."""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import Collect, check, fail, log, skip  # noqa: E402

from proton import Delivery, Message  # noqa: E402
from proton.utils import BlockingConnection, LinkDetached  # noqa: E402

PW = {"alice": "alice-pw", "boss": "boss-pw"}


def passwd(user):
    prog = os.path.join(os.environ.get("MQD_BUILDDIR", ""), "mqd-passwd")
    if not os.access(prog, os.X_OK):
        skip("mqd-passwd not built")
    r = subprocess.run([prog, "--both", "--iterations", "4096", user], input=PW[user] + "\n",
                       capture_output=True, text=True, timeout=30 * mqdtest.SLOW)
    check(r.returncode == 0, "mqd-passwd: %s" % r.stderr)
    return r.stdout


def connect(b, user):
    return BlockingConnection(b.url, timeout=10 * mqdtest.SLOW, user=user, password=PW[user],
                              allowed_mechs="PLAIN")


def refusal(b, user, address, receiver=False):
    """The condition (name, description) of a refused attach."""
    c = connect(b, user)
    try:
        if receiver:
            c.create_receiver(address)
        else:
            c.create_sender(address)
    except LinkDetached as e:
        cond = e.link.remote_condition
        return cond.name, cond.description or ""
    finally:
        c.close()
    fail("%s: attach to %s was not refused" % (user, address))


def topics(b):
    rc, out, err = mqdtest.mqctl(b.url.replace("amqp://", "amqp://boss:%s@" % PW["boss"]),
                                 "--json", "topic", "list")
    check(rc == 0, "topic list: %s" % err)
    return sorted(t["name"] for t in json.loads(out))


def body(t):
    conf = os.path.join(t.tmpdir, "mqd.conf")
    with open(conf, "w") as f:
        f.write("allow_anonymous = off\nauto_create_topics = on\n")
        f.write(passwd("alice") + passwd("boss"))
        f.write("[acl]\nallow alice send,receive,browse orders.*\nallow boss all *\n")
    b = t.broker("acl", conf=conf)
    coll = Collect()
    for what, addr, rcv in (("sender", "orders.new", False), ("receiver", "orders.new2", True),
                            ("group receiver", "orders.new3/ConsumerGroups/g1", True)):
        with coll.case("%s to a topic alice may not create" % what):
            name, desc = refusal(b, "alice", addr, rcv)
            topic = addr.split("/")[0]
            log("%s: %s %s" % (addr, name, desc))
            check(name == "amqp:unauthorized-access", "condition %s, want amqp:unauthorized-access" % name)
            check("'create'" in desc and "'%s'" % topic in desc,
                  "description names no right or topic: %r" % desc)
    with coll.case("anonymous relay to a topic alice may not create"):
        url = b.url.replace("amqp://", "amqp://alice:%s@" % PW["alice"])
        snd = mqdtest.Sender(url, None, [Message(address="orders.relay", body="x")])
        mqdtest.run_container(snd, 30)
        check(len(snd.outcomes) == 1, "outcomes %r (accepted %d)" % (snd.outcomes, snd.accepted))
        _, state, cond = snd.outcomes[0]
        check(state == Delivery.REJECTED, "outcome %s, want rejected" % state)
        check(cond is not None and cond.name == "amqp:unauthorized-access"
              and "'create'" in (cond.description or ""), "condition %r" % cond)
    with coll.case("nothing was created"):
        got = topics(b)
        check(got == [], "topics after the refusals: %r" % got)
    with coll.case("a user with create makes it, then alice sends and receives"):
        c = connect(b, "boss")
        c.create_sender("orders.new").send(Message(body="from boss"))
        c.close()
        c = connect(b, "alice")
        c.create_sender("orders.new").send(Message(body="from alice"))
        r = c.create_receiver("orders.new", credit=10)
        bodies = [r.receive(timeout=10 * mqdtest.SLOW).body for _ in range(2)]
        r.accept()
        c.close()
        check(bodies == ["from boss", "from alice"], "bodies %r" % bodies)
        check(topics(b) == ["orders.new"], "topics %r" % topics(b))
    with coll.case("a missing right to send is still named as such"):
        name, desc = refusal(b, "alice", "billing.x")
        check(name == "amqp:unauthorized-access" and "not allowed to send" in desc,
              "%s %r" % (name, desc))
    b.stop()
    b.sets["auto_create_topics"] = "off"
    b.start()
    with coll.case("auto_create_topics = off: a missing topic is not-found"):
        name, desc = refusal(b, "alice", "orders.none")
        check(name == "amqp:not-found", "condition %s, want amqp:not-found (%r)" % (name, desc))
        name, desc = refusal(b, "boss", "orders.none")
        check(name == "amqp:not-found", "boss: condition %s, want amqp:not-found" % name)
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=120)
