#!/usr/bin/python3
"""Writes seed inputs for fuzz_conn: byte 0 is the chunk size the target writes in (0: all
at once), the rest is what a client sends on one connection.

Client sessions are real Proton client bytes: a python-qpid-proton client Transport is
paired in memory with a Proton server Transport (SASL ANONYMOUS, credit granted on every
receiving link), and what the client writes is recorded: producers to a topic, to a
partition and through the anonymous relay, a consumer that accepts/releases/rejects, a
$management request, $cbs put-token requests, a multi-frame message, presettled sends, a transaction coordinator. Then the hostile
sequences of tests/interop/52-hostile-frames.py (a delivery started without delivery-id,
on a plain link, the relay and $management; aborted; unknown handle)."""
import os
import struct
import sys

from proton import (Collector, Connection, Data, Delivery, Described, Endpoint, Event,  # noqa: F401
                    Message, SASL, Terminus, Transport, ulong)


class Pair:
    """A client Connection and a server whose replies drive it; records client bytes."""

    def __init__(self):
        self.rec = b""
        self.c = Connection()
        self.c.container = "seed-client"
        self.ct = Transport()
        self.ct.sasl().allowed_mechs("ANONYMOUS")
        self.ct.bind(self.c)
        self.s = Connection()
        self.coll = Collector()
        self.s.collect(self.coll)
        self.st = Transport(Transport.SERVER)
        ss = self.st.sasl()
        ss.allowed_mechs("ANONYMOUS")
        ss.done(SASL.OK)
        self.st.bind(self.s)
        self.c.open()

    def pump(self, rounds=20):
        for _ in range(rounds):
            moved = False
            n = self.ct.pending()
            if n > 0:
                b = self.ct.peek(n)
                self.ct.pop(len(b))
                self.rec += b
                self.st.push(b)
                moved = True
            n = self.st.pending()
            if n > 0:
                b = self.st.peek(n)
                self.st.pop(len(b))
                self.ct.push(b)
                moved = True
            self.serve()
            if not moved:
                break

    def serve(self):
        ev = self.coll.peek()
        while ev:
            t = ev.type
            if t == Event.CONNECTION_REMOTE_OPEN:
                self.s.open()
            elif t == Event.SESSION_REMOTE_OPEN:
                ev.session.open()
            elif t == Event.LINK_REMOTE_OPEN:
                lk = ev.link
                lk.source.copy(lk.remote_source)
                lk.target.copy(lk.remote_target)
                lk.open()
                if lk.is_receiver:
                    lk.flow(100)
            elif t == Event.DELIVERY:
                d = ev.delivery
                if d.link.is_receiver and not d.partial:
                    d.link.recv(d.pending)
                    d.update(Delivery.ACCEPTED)
                    d.settle()
                    d.link.advance()
            elif t == Event.LINK_FLOW and ev.link.is_sender:
                lk = ev.link
                while lk.credit > 0 and lk.queued < 3:
                    d = lk.delivery("srv-%d" % lk.queued)
                    lk.send(Message(body="to-client").encode())
                    lk.advance()
            self.coll.pop()
            ev = self.coll.peek()


def send(p, snd, msgs, settled=False):
    for i, m in enumerate(msgs):
        d = snd.delivery("tag-%d" % i)
        snd.send(m.encode())
        snd.advance()
        if settled:
            d.settle()
        p.pump()


def session_producer(address, msgs, settled=False):
    p = Pair()
    ssn = p.c.session()
    ssn.open()
    snd = ssn.sender("seed-snd")
    snd.target.address = address
    snd.open()
    p.pump()
    send(p, snd, msgs, settled)
    snd.close()
    ssn.close()
    p.c.close()
    p.pump()
    return p.rec


def session_consumer(address, outcomes):
    p = Pair()
    ssn = p.c.session()
    ssn.open()
    rcv = ssn.receiver("seed-rcv")
    rcv.source.address = address
    rcv.open()
    rcv.flow(10)
    p.pump()
    # what mqd would deliver is not in this stream; the dispositions name delivery ids
    # 0.. as mqd numbers its transfers, so the broker's consumer path sees them
    for d in list(_deliveries(rcv)):
        d.update(outcomes[0])
        d.settle()
    p.pump()
    rcv.close()
    p.c.close()
    p.pump()
    return p.rec


def _deliveries(rcv):
    d = rcv.current
    while d:
        yield d
        rcv.advance()
        d = rcv.current


def session_mgmt():
    p = Pair()
    ssn = p.c.session()
    ssn.open()
    rcv = ssn.receiver("seed-reply")
    rcv.source.dynamic = True
    rcv.open()
    rcv.flow(5)
    snd = ssn.sender("seed-mgmt")
    snd.target.address = "$management"
    snd.open()
    p.pump()
    m = Message(properties={"operation": "QUERY", "type": "com.microsoft:eventhub",
                            "name": "seed-topic"}, reply_to="seed-reply", body=None)
    m.properties = {"operation": "READ", "type": "com.microsoft:eventhub", "name": "seed-topic"}
    send(p, snd, [m])
    p.c.close()
    p.pump()
    return p.rec


def session_cbs(with_target):
    """The Event Hubs SDKs' $cbs exchange: a receiver from $cbs (reply-to = its target, or
    its link name when it has none), a sender to $cbs and a put-token request."""
    p = Pair()
    ssn = p.c.session()
    ssn.open()
    rcv = ssn.receiver("cbs-seed")
    rcv.source.address = "$cbs"
    if with_target:
        rcv.target.address = "cbs-seed"
    rcv.open()
    rcv.flow(5)
    snd = ssn.sender("seed-cbs")
    snd.target.address = "$cbs"
    snd.open()
    p.pump()
    tok = ("SharedAccessSignature sr=sb%3A%2F%2F127.0.0.1%3A5672%2Fseed-topic&sig="
           "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA%3D&se=4102444800&skn=seed")
    m = Message(id="cbs-1", reply_to="cbs-seed", body=tok,
                properties={"operation": "put-token", "type": "servicebus.windows.net:sastoken",
                            "name": "sb://127.0.0.1:5672/seed-topic", "expiration": 4102444800000})
    send(p, snd, [m])
    p.c.close()
    p.pump()
    return p.rec


def session_relay():
    p = Pair()
    ssn = p.c.session()
    ssn.open()
    snd = ssn.sender("seed-relay")
    snd.target.address = None
    snd.open()
    p.pump()
    send(p, snd, [Message(address="seed-topic", body="via relay"),
                  Message(address="seed-topic/Partitions/0", body="via relay p0")])
    p.c.close()
    p.pump()
    return p.rec


def session_multiframe():
    p = Pair()
    p.ct.max_frame_size = 512
    ssn = p.c.session()
    ssn.open()
    snd = ssn.sender("seed-big")
    snd.target.address = "seed-topic"
    snd.open()
    p.pump()
    send(p, snd, [Message(body="x" * 3000, properties={"k": "v"})])
    p.c.close()
    p.pump()
    return p.rec


def session_txn():
    """A coordinator link: declare, then a discharge naming the id mqd gives its first
    transaction on a fresh server (the fuzzer mutates it)."""
    p = Pair()
    ssn = p.c.session()
    ssn.open()
    snd = ssn.sender("seed-txn")
    snd.target.type = Terminus.COORDINATOR
    snd.target.capabilities.put_array(False, Data.SYMBOL)
    snd.target.capabilities.enter()
    snd.target.capabilities.put_symbol("amqp:local-transactions")
    snd.target.capabilities.exit()
    snd.open()
    p.pump()
    send(p, snd, [Message(body=Described(ulong(0x31), [])),
                  Message(body=Described(ulong(0x32), [b"\x00\x00\x00\x00\x00\x00\x00\x01", False]))])
    p.c.close()
    p.pump()
    return p.rec


# ---------------------------------------------------------------- hostile (test 52)

def frame(body, ftype=0, channel=0):
    return struct.pack(">IBBH", 8 + len(body), 2, ftype, channel) + body


def transfer(handle=0, delivery_id=None, tag=b"t", more=True, aborted=None, payload=b"x"):
    f = [b"\x52" + bytes([handle]), b"\x40" if delivery_id is None else b"\x52" + bytes([delivery_id]),
         b"\xa0" + bytes([len(tag)]) + tag, b"\x43", b"\x42", b"\x41" if more else b"\x42"]
    if aborted is not None:
        f += [b"\x40", b"\x40", b"\x40", b"\x41" if aborted else b"\x42"]
    body = b"".join(f)
    return frame(b"\x00\x53\x14\xc0" + bytes([len(body) + 1, len(f)]) + body + payload)


def hostile(address, frames):
    """A real client's SASL/open/begin/attach on `address`, then raw frames."""
    p = Pair()
    ssn = p.c.session()
    ssn.open()
    snd = ssn.sender("seed-hostile")
    snd.target.address = address
    snd.open()
    p.pump()
    return p.rec + b"".join(frames)


def interleaved(frames):
    """Two senders on one session (handles 0 and 1), then raw frames: multi-frame
    deliveries interleaved across them made the old mqd reject and settle a held send
    (a stale delivery event), then use it when its record became stable (SIGSEGV)."""
    p = Pair()
    ssn = p.c.session()
    ssn.open()
    for i in range(2):
        snd = ssn.sender("seed-il-%d" % i)
        snd.target.address = "seed-topic-%d" % i
        snd.open()
    p.pump()
    return p.rec + b"".join(frames)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                             "corpus", "fuzz_conn")
    os.makedirs(out, exist_ok=True)
    body = b"\x00\x53\x77\xa1\x0bhello-split"
    seeds = {
        "producer": session_producer("seed-topic", [Message(body="m%d" % i) for i in range(3)]),
        "producer-partition": session_producer("seed-topic/Partitions/0", [Message(body="p0")]),
        "producer-presettled": session_producer("seed-topic", [Message(body="ps")], settled=True),
        "producer-keyed": session_producer("seed-topic", [Message(
            body="k", annotations={"x-opt-partition-key": "key-1"}, id="mid-1")]),
        "consumer-accept": session_consumer("seed-topic", [Delivery.ACCEPTED]),
        "consumer-group": session_consumer("seed-topic/ConsumerGroups/g1", [Delivery.RELEASED]),
        "consumer-reject": session_consumer("seed-topic/ConsumerGroups/g1/Partitions/0", [Delivery.REJECTED]),
        "mgmt": session_mgmt(),
        "cbs": session_cbs(True),
        "cbs-link-name": session_cbs(False),
        "hostile-cbs-empty": hostile("$cbs", [transfer(delivery_id=0, more=False, payload=b"")]),
        "relay": session_relay(),
        "multiframe": session_multiframe(),
        "txn": session_txn(),
        "hostile-plain": hostile("seed-topic", [transfer()]),
        "hostile-relay": hostile(None, [transfer()]),
        "hostile-mgmt": hostile("$management", [transfer()]),
        "hostile-single": hostile("seed-topic", [transfer(more=False, payload=b"\x00\x53\x77\xa1\x01x")]),
        "hostile-aborted": hostile("seed-topic", [transfer(more=True, aborted=True)]),
        "hostile-after-abort": hostile("seed-topic", [
            transfer(delivery_id=0, tag=b"a"), transfer(tag=b"a", more=False, aborted=True),
            transfer(tag=b"b")]),
        "hostile-handle": hostile("seed-topic", [transfer(handle=7, delivery_id=0)]),
        "interleaved": interleaved([
            transfer(handle=0, delivery_id=0, tag=b"a", payload=body[:4]),
            transfer(handle=1, delivery_id=1, tag=b"b", payload=body[:6]),
            transfer(handle=0, tag=b"a", payload=body[4:9]),
            transfer(handle=1, tag=b"b", more=False, payload=body[6:]),
            transfer(handle=0, tag=b"a", more=False, payload=body[9:])]),
        "continuation": hostile("seed-topic", [
            transfer(delivery_id=0, tag=b"s1", payload=body[:5]),
            transfer(tag=b"s1", more=False, payload=body[5:])]),
    }
    for name, data in seeds.items():
        for chunk in (0, 7, 64):
            with open(os.path.join(out, "%s-%d" % (name, chunk)), "wb") as f:
                f.write(bytes([chunk]) + data)
    print("%d seeds in %s" % (3 * len(seeds), out))


if __name__ == "__main__":
    main()
