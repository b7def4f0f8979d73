#!/usr/bin/python3
"""Issue 32 point 2: every `$management` request is authorized against the entity it
names, for SAS keys and [acl] users alike.

sas   sas_required = on, `[sas_key hubA-manage]` with scope = hubA, rights = manage, and an
      unscoped root key. hubA and hubB hold messages and a group `g` with committed
      offsets. Over one connection with a hubA-manage token for hubA (SASL ANONYMOUS, as
      the Event Hubs SDKs log in): topic QUERY lists hubA only, group QUERY hubA's groups
      only; READ, Event Hubs READ, PEEK, group READ, RESET and DELETE, UPDATE and DELETE of
      hubB, and CREATE of hubC are 401 (READ of a topic that does not exist is the same
      401: a refusal does not tell what exists); then, read with the root key: hubB's
      offsets, partitions and messages are unchanged, hubC does not exist (nor its data
      directory). The node-wide operations (connections, broker, config, users) are 401,
      and so is the hubA key's put-token for a namespace-wide audience; the same operations
      on hubA succeed (READ, RESET to earliest, UPDATE to 3 partitions, DELETE). A root-key
      token for one hub (not namespace-wide) lists that hub only and is refused the
      node-wide operations; a namespace-wide root token gets them.
acl   a user whose [acl] rules name only `orders.*` (all rights there): over AMQP (a plain
      Proton client and mqctl) the topic list holds orders.* only; READ, RESET of a group,
      DELETE of `secret` and CREATE of `other` are 401 and change nothing (offsets,
      messages, topic list asserted); READ, RESET, CREATE and DELETE within orders.* work;
      the node-wide ones are 401. Through the web console (mqd_mgmt_call), a user with
      monitor and manage on `$management` but only orders.* for topics sees orders.* only
      and its reset of secret's group is refused (offsets unchanged)."""

import base64
import hashlib
import hmac
import json
import os
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import consoletest  # noqa: E402
import mqdtest  # noqa: E402
from mqdtest import Collect, check, log  # noqa: E402

from proton import Message  # noqa: E402
from proton.reactor import LinkOption  # noqa: E402
from proton.utils import BlockingConnection  # noqa: E402

T_TOPIC, T_GROUP = "com.mqd:topic", "com.mqd:consumergroup"
KEYS = {"hubA-manage": "hubA-manage-key-105", "root": "root-key-105"}


def sas_token(aud, key_name, se):
    sr = urllib.parse.quote(aud, safe="")
    mac = hmac.new(KEYS[key_name].encode(), ("%s\n%d" % (sr, se)).encode(), hashlib.sha256)
    sig = urllib.parse.quote(base64.b64encode(mac.digest()).decode(), safe="")
    return "SharedAccessSignature sr=%s&sig=%s&se=%d&skn=%s" % (sr, sig, se, key_name)


class FixedTarget(LinkOption):
    """A reply receiver's target address, as the Event Hubs SDKs attach the $cbs one."""

    def __init__(self, address):
        self.address = address

    def apply(self, link):
        link.target.address = self.address


class Mgmt:
    """One connection with a `$management` sender and its dynamic reply receiver, and
    (once a token is put) a `$cbs` pair as the SDKs attach it; request() returns
    (status, description, body)."""
    conns = 0

    def __init__(self, url, **kw):
        self.c = BlockingConnection(url, timeout=10 * mqdtest.SLOW, **kw)
        self.r = self.c.create_receiver(None, dynamic=True, credit=100)
        self.reply_to = self.r.remote_source.address
        self.mgmt = self.c.create_sender("$management")
        self.cbs = None
        self.n = 0
        Mgmt.conns += 1
        self.tag = "cbs-105-%d" % Mgmt.conns

    def _call(self, sender, receiver, reply_to, props, body):
        self.n += 1
        mid = "req-%d" % self.n
        sender.send(Message(id=mid, reply_to=reply_to, properties=props, body=body))
        m = receiver.receive(timeout=10 * mqdtest.SLOW)
        receiver.accept()
        check(m.correlation_id == mid, "reply to %r, want %r" % (m.correlation_id, mid))
        ap = {str(k): v for k, v in (m.properties or {}).items()}
        return ap.get("status-code"), ap.get("status-description"), m.body

    def request(self, op, typ, name=None, body=None, **props):
        p = {"operation": op, "type": typ}
        if name is not None:
            p["name"] = name
        p.update(props)
        st, desc, b = self._call(self.mgmt, self.r, self.reply_to, p, body)
        log("%s %s %s -> %s %s" % (op, typ, name, st, desc))
        return st, desc, b

    def put_token(self, aud, key_name):
        if self.cbs is None:
            self.cbs = (self.c.create_sender("$cbs"),
                        self.c.create_receiver("$cbs", name=self.tag + "-r", options=FixedTarget(self.tag)))
        tok = sas_token(aud, key_name, int(time.time()) + 600)
        st, desc, _ = self._call(self.cbs[0], self.cbs[1], self.tag,
                                 {"operation": "put-token", "name": aud,
                                  "type": "servicebus.windows.net:sastoken"}, tok)
        log("put-token %s (%s) -> %s %s" % (aud, key_name, st, desc))
        return st

    def send(self, address, n):
        s = self.c.create_sender(address)
        for i in range(n):
            s.send(Message(body="%s-%d" % (address, i)))
        s.close()

    def close(self):
        self.c.close()


def want(got, status, what):
    check(got[0] == status, "%s: status %s (%s), want %s" % (what, got[0], got[1], status))
    return got


def names(m, typ=T_TOPIC):
    st, desc, body = want(m.request("QUERY", typ), 200, "QUERY " + typ)
    return sorted(x["name"] if typ == T_TOPIC else "%s/%s" % (x["topic"], x["group"]) for x in body)


def committed(m, topic, group="g"):
    _, _, body = want(m.request("READ", T_GROUP, "%s/%s" % (topic, group)), 200, "READ group")
    return [p["committed"] for p in body["partitions"]]


def describe(m, topic):
    _, _, body = want(m.request("READ", T_TOPIC, topic), 200, "READ " + topic)
    return body["partitions"], body["messages"]


def fill(m, topic):
    """5 messages on partition 0, 5 on 1, and group g committed at 3 and 2."""
    for p in (0, 1):
        m.send("%s/Partitions/%d" % (topic, p), 5)
    for p, off in ((0, 3), (1, 2)):
        want(m.request("COMMIT", T_GROUP, "%s/g" % topic, partition=p, offset=off), 200, "COMMIT")
    check(committed(m, topic) == [3, 2], "%s/g set up: %r" % (topic, committed(m, topic)))


def node_wide_refused(m, who):
    for op, typ, kw in (("QUERY", "com.mqd:connection", {}), ("READ", "com.mqd:broker", {}),
                        ("READ", "com.mqd:config", {}), ("QUERY", "com.mqd:user", {}),
                        ("QUERY", "com.mqd:link", {}), ("RELOAD", "com.mqd:broker", {})):
        want(m.request(op, typ, **kw), 401, "%s: %s %s" % (who, op, typ))


def sas_cases(t, coll):
    conf = os.path.join(t.tmpdir, "sas.conf")
    with open(conf, "w") as f:
        f.write("allow_anonymous = on\nsas_required = on\nauto_create_topics = off\n"
                "[topic hubA]\npartitions = 2\n[topic hubB]\npartitions = 2\n"
                "[sas_key hubA-manage]\nkey = %s\nrights = manage\nscope = hubA\n"
                "[sas_key root]\nkey = %s\nrights = manage\nscope = *\n"
                % (KEYS["hubA-manage"], KEYS["root"]))
    b = t.broker("sas", conf=conf)
    ns = "sb://127.0.0.1:%d" % b.port
    root = Mgmt(b.url)
    check(root.put_token(ns, "root") == 200, "namespace-wide root token")
    fill(root, "hubA")
    fill(root, "hubB")
    before = describe(root, "hubB")
    scoped = Mgmt(b.url)
    with coll.case("the hubA key: its tokens cover hubA only"):
        check(scoped.put_token(ns + "/hubB", "hubA-manage") == 401, "token for hubB")
        check(scoped.put_token(ns, "hubA-manage") == 401, "namespace-wide token")
        check(scoped.put_token(ns + "/hubA", "hubA-manage") == 200, "token for hubA")
    with coll.case("the hubA key lists hubA only"):
        check(names(scoped) == ["hubA"], "topic list %r" % names(scoped))
        groups = names(scoped, T_GROUP)
        check("hubA/g" in groups and all(g.startswith("hubA/") for g in groups), "groups %r" % groups)
    with coll.case("the hubA key reads nothing of hubB"):
        st, desc, _ = want(scoped.request("READ", T_TOPIC, "hubB"), 401, "READ hubB")
        st2, desc2, _ = want(scoped.request("READ", T_TOPIC, "hubZ"), 401, "READ hubZ (absent)")
        check(desc2 == desc.replace("hubB", "hubZ"), "refusals differ: %r vs %r" % (desc, desc2))
        want(scoped.request("READ", "com.microsoft:eventhub", "hubB"), 401, "Event Hubs READ hubB")
        want(scoped.request("READ", "com.microsoft:partition", "hubB", partition="0"), 401,
             "partition READ hubB")
        want(scoped.request("PEEK", T_TOPIC, "hubB"), 401, "PEEK hubB")
        want(scoped.request("READ", T_GROUP, "hubB/g"), 401, "group READ hubB/g")
        want(scoped.request("QUERY", T_GROUP, topic="hubB"), 401, "group QUERY hubB")
    with coll.case("the hubA key changes nothing of hubB"):
        want(scoped.request("RESET", T_GROUP, "hubB/g", to="earliest"), 401, "RESET hubB/g")
        want(scoped.request("RESET", T_GROUP, topic="hubB", group="g", to="latest"), 401,
             "RESET topic=hubB group=g")
        want(scoped.request("COMMIT", T_GROUP, "hubB/g", partition=0, offset=5), 401, "COMMIT hubB/g")
        want(scoped.request("DELETE", T_GROUP, "hubB/g"), 401, "group DELETE hubB/g")
        want(scoped.request("UPDATE", T_TOPIC, "hubB", {"partitions": 4}), 401, "UPDATE hubB")
        want(scoped.request("DELETE", T_TOPIC, "hubB"), 401, "DELETE hubB")
        want(scoped.request("CREATE", T_TOPIC, "hubC", {"partitions": 1}), 401, "CREATE hubC")
        check(committed(root, "hubB") == [3, 2], "hubB/g offsets %r" % committed(root, "hubB"))
        check(describe(root, "hubB") == before == (2, 10), "hubB %r, before %r" % (describe(root, "hubB"), before))
        want(root.request("READ", T_TOPIC, "hubC"), 404, "hubC after the refused CREATE")
        check(names(root) == ["hubA", "hubB"], "topics %r" % names(root))
        check(not os.path.exists(os.path.join(b.data_dir, "topics", "hubC")), "hubC's data dir")
    with coll.case("the hubA key manages nothing node-wide"):
        node_wide_refused(scoped, "hubA key")
        want(scoped.request("CLOSE", "com.mqd:connection", "127.0.0.1:1"), 401, "connection CLOSE")
    with coll.case("the hubA key manages hubA"):
        want(scoped.request("READ", "com.microsoft:eventhub", "hubA"), 200, "Event Hubs READ hubA")
        want(scoped.request("PEEK", T_TOPIC, "hubA", partition=0), 200, "PEEK hubA")
        _, _, g = want(scoped.request("RESET", T_GROUP, "hubA/g", to="earliest"), 200, "RESET hubA/g")
        check([p["committed"] for p in g["partitions"]] == [0, 0], "hubA/g after reset %r" % g)
        _, _, v = want(scoped.request("UPDATE", T_TOPIC, "hubA", {"partitions": 3}), 200, "UPDATE hubA")
        check(v["partitions"] == 3, "hubA partitions %r" % v["partitions"])
        want(scoped.request("DELETE", T_TOPIC, "hubA"), 204, "DELETE hubA")
        check(names(root) == ["hubB"], "topics after DELETE hubA: %r" % names(root))
    with coll.case("a root-key token for one hub covers that hub, not the node"):
        hubtok = Mgmt(b.url)
        check(hubtok.put_token(ns + "/hubB", "root") == 200, "root token for hubB")
        check(names(hubtok) == ["hubB"], "its list %r" % names(hubtok))
        node_wide_refused(hubtok, "root key, hubB token")
        want(hubtok.request("CREATE", T_TOPIC, "hubC", {"partitions": 1}), 401, "CREATE hubC")
        hubtok.close()
    with coll.case("a namespace-wide root token manages the node"):
        _, _, conns = want(root.request("QUERY", "com.mqd:connection"), 200, "connections")
        check(len(conns) >= 2, "connections %r" % conns)
        want(root.request("READ", "com.mqd:broker"), 200, "broker READ")
        want(root.request("CREATE", T_TOPIC, "hubC", {"partitions": 1}), 201, "root CREATE hubC")
    scoped.close()
    root.close()
    b.check_alive("after the SAS cases")
    log_text = b.log_text()
    check("status=401" in log_text and 'target="hubB"' in log_text, "refusals audited")


def acl_cases(t, coll):
    pw = {"carol": "carol-pw", "admin": "admin-pw", "dave": "dave-pw"}
    conf = os.path.join(t.tmpdir, "acl.conf")
    cport = mqdtest.free_port()
    with open(conf, "w") as f:
        f.write("allow_anonymous = off\nallow_plain_without_tls = on\nauto_create_topics = off\n"
                "console_listen = 127.0.0.1:%d\n" % cport)
        f.write("[topic orders.a]\npartitions = 2\n[topic orders.b]\npartitions = 1\n"
                "[topic secret]\npartitions = 2\n")
        for u, p in pw.items():
            f.write(consoletest.mqd_passwd(u, p))
        f.write("[acl]\nallow carol all orders.*\nallow admin all *\n"
                "allow dave monitor,manage $management\nallow dave all orders.*\n")
    b = t.broker("acl", conf=conf)
    mqdtest.wait_port(cport, 10 * mqdtest.SLOW, b.proc, "console")
    user = lambda u: Mgmt(b.url, user=u, password=pw[u], allowed_mechs="PLAIN")  # noqa: E731
    admin = user("admin")
    fill(admin, "secret")
    fill(admin, "orders.a")
    before = describe(admin, "secret")
    carol = user("carol")
    with coll.case("carol (orders.*) lists orders.* only"):
        check(names(carol) == ["orders.a", "orders.b"], "topic list %r" % names(carol))
        groups = names(carol, T_GROUP)
        check("orders.a/g" in groups and all(g.startswith("orders.") for g in groups),
              "groups %r" % groups)
        rc, out, err = mqdtest.mqctl(b.url.replace("amqp://", "amqp://carol:%s@" % pw["carol"]),
                                     "--json", "topic", "list")
        check(rc == 0 and sorted(x["name"] for x in json.loads(out)) ==
              ["orders.a", "orders.b"], "mqctl topic list: %s %r %r" % (rc, out, err))
    with coll.case("carol cannot read or change secret, nor create other"):
        want(carol.request("READ", T_TOPIC, "secret"), 401, "READ secret")
        want(carol.request("READ", T_TOPIC, "nosuch"), 401, "READ nosuch")
        want(carol.request("READ", T_GROUP, "secret/g"), 401, "group READ secret/g")
        want(carol.request("RESET", T_GROUP, "secret/g", to="earliest"), 401, "RESET secret/g")
        want(carol.request("DELETE", T_TOPIC, "secret"), 401, "DELETE secret")
        want(carol.request("CREATE", T_TOPIC, "other", {"partitions": 1}), 401, "CREATE other")
        rc, out, err = mqdtest.mqctl(b.url.replace("amqp://", "amqp://carol:%s@" % pw["carol"]),
                                     "topic", "delete", "secret")
        check(rc != 0 and "not allowed" in err, "mqctl topic delete secret: %s %r" % (rc, err))
        check(committed(admin, "secret") == [3, 2], "secret/g %r" % committed(admin, "secret"))
        check(describe(admin, "secret") == before == (2, 10), "secret %r" % (describe(admin, "secret"),))
        check(names(admin) == ["orders.a", "orders.b", "secret"], "topics %r" % names(admin))
        node_wide_refused(carol, "carol")
    with coll.case("carol manages orders.*"):
        want(carol.request("READ", T_TOPIC, "orders.a"), 200, "READ orders.a")
        _, _, g = want(carol.request("RESET", T_GROUP, "orders.a/g", to="latest"), 200, "RESET")
        check([p["committed"] for p in g["partitions"]] == [5, 5], "orders.a/g %r" % g)
        want(carol.request("CREATE", T_TOPIC, "orders.c", {"partitions": 1}), 201, "CREATE orders.c")
        want(carol.request("DELETE", T_TOPIC, "orders.b"), 204, "DELETE orders.b")
        check(names(admin) == ["orders.a", "orders.c", "secret"], "topics %r" % names(admin))
    with coll.case("the console: dave (manage on $management, orders.* for topics)"):
        h = consoletest.Http(cport)
        st, _ = h.login("dave", pw["dave"])
        check(st == 200, "dave's console login: %s" % st)
        st, doc = h.get("topics")
        check(st == 200 and sorted(x["name"] for x in doc) == ["orders.a", "orders.c"],
              "console topics: %s %r" % (st, doc))
        st, doc = h.get("topics/secret")
        check(st == 403, "console READ secret: %s %r" % (st, doc))
        st, doc = h.post("groups/secret/g/reset", {"to": "earliest"})
        check(st == 403, "console reset of secret/g: %s %r" % (st, doc))
        check(committed(admin, "secret") == [3, 2], "secret/g %r" % committed(admin, "secret"))
        st, doc = h.post("groups/orders.a/g/reset", {"to": "earliest"})
        check(st == 200, "console reset of orders.a/g: %s %r" % (st, doc))
    carol.close()
    admin.close()
    b.check_alive("after the ACL cases")


def body(t):
    coll = Collect()
    sas_cases(t, coll)
    acl_cases(t, coll)
    coll.finish()


if __name__ == "__main__":  # 106 imports Mgmt from here
    mqdtest.main(body, timeout=240)
