#!/usr/bin/python3
"""The broker across power cuts: mqd's data dir on powercutfs. Each round creates a new
topic (the case that lost every acknowledged message: its directories' names were never
synced), sends durable messages to it unsettled while mqd is SIGKILLed at a random moment,
then cuts the file system (every other round cut-torn), remounts it and restarts mqd. Then
every message mqd accepted must be there, in order and intact: browsed (distribution-mode
copy) from this round's topic and one earlier one each round, from every topic at the
end.

MQD_PC_ROUNDS rounds (default 4; the longer runs in docs/reliability.md set more).
Then the check of the checker: with tests/fault/nosync.so preloaded (segment fdatasyncs
become no-ops: sends acknowledged before any sync), 2 rounds with SIGKILL alone lose
nothing, and 2 rounds with power cuts lose acknowledged messages.
Exit 77 without root or FUSE."""

import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "interop"))
import mqdtest  # noqa: E402
import pcfs  # noqa: E402
from mqdtest import check, log  # noqa: E402

from proton import Message  # noqa: E402
from proton.handlers import MessagingHandler  # noqa: E402
from proton.reactor import Container, Copy  # noqa: E402

ROUNDS = int(os.environ.get("MQD_PC_ROUNDS", "4"))
MAX_MSGS = 200000  # never reached: the kill comes first


class KilledSender(MessagingHandler):
    """Sends durable messages to `address` until told to stop or the broker goes away;
    records the index of every message the broker accepted."""

    def __init__(self, url, address, n):
        super().__init__(auto_settle=True)
        self.url, self.address, self.n = url, address, n
        self.sent = 0
        self.accepted = set()
        self.index = {}
        self.error = None

    def on_start(self, event):
        self.conn = event.container.connect(self.url, reconnect=False)
        event.container.create_sender(self.conn, self.address)

    def on_sendable(self, event):
        while event.sender.credit and self.sent < self.n:
            m = Message(body="%s-%05d" % (self.address, self.sent), durable=True)
            d = event.sender.send(m)
            self.index[d.tag] = self.sent
            self.sent += 1

    def on_accepted(self, event):
        self.accepted.add(self.index[event.delivery.tag])
        if len(self.accepted) == self.n:
            event.connection.close()

    def on_transport_error(self, event):
        self.error = event.transport.condition
        if event.connection is not None:  # None once the killed broker's transport is unbound
            event.connection.close()

    def on_disconnected(self, event):
        pass


def browse(url, address):
    r = mqdtest.Receiver(url, address, idle=2.0, options=Copy())
    mqdtest.run_container(r, 60)
    return [m.body for m in r.got]


def run_rounds(t, fs, b, rounds, rng, prefix, cut=True, expect_loss=False):
    """rounds of: new topic, sends, SIGKILL, cut (or not), remount, restart, browse.
    Returns (accepted, lost)."""
    accepted = {}  # topic -> sorted accepted indices
    lost_total = 0
    for rnd in range(rounds):
        b.start()
        topic = "%s%03d" % (prefix, rnd)
        s = KilledSender(b.url, topic, MAX_MSGS)
        th = threading.Thread(target=lambda: Container(s).run(), daemon=True)
        th.start()
        time.sleep(rng.uniform(0.2, 1.2) * mqdtest.SLOW)
        b.kill()
        th.join(30)
        check(not th.is_alive(), "round %d: the sender did not stop after the kill" % rnd)
        accepted[topic] = sorted(s.accepted)
        torn = rnd % 2 == 1
        st = fs.stats()
        if cut:
            fs.cut(torn_seed=rng.randrange(1, 1 << 30) if torn else None)
        fs.remount()
        log("%s round %d: %d sent, %d accepted, then SIGKILL%s (%d dirty files, %d pending "
            "directory changes: %s)" % (prefix, rnd, s.sent, len(s.accepted),
                                        (" and cut-torn" if torn else " and cut") if cut else "",
                                        st["dirty_files"], st["pending_dir_changes"], st["pending"][:5]))
        b.start()
        # this round's topic and one earlier one each round; all of them at the end
        last = rnd == rounds - 1
        for tp, idx in accepted.items():
            if not last and tp != topic and tp != "%s%03d" % (prefix, rng.randrange(rnd + 1)):
                continue
            got = browse(b.url, tp)
            want = ["%s-%05d" % (tp, i) for i in idx]
            have = set(got)
            lost = [w for w in want if w not in have]
            if last or tp == topic:
                lost_total += len(lost)
            if expect_loss:
                continue
            check(not lost, "%s round %d: topic %s lost %d of %d accepted messages (first %s)"
                  % (prefix, rnd, tp, len(lost), len(want), lost[:3]))
            pos = [got.index(w) for w in want]
            check(pos == sorted(pos), "round %d: topic %s out of order" % (rnd, tp))
        b.stop()
    total = sum(len(v) for v in accepted.values())
    check(total > 0, "no message was accepted in %d rounds" % rounds)
    log("%s: %d rounds: %d accepted messages in %d new topics, %d lost"
        % (prefix, rounds, total, len(accepted), lost_total))
    return total, lost_total


def body(t):
    why = pcfs.skip_reason()
    if why:
        mqdtest.skip(why)
    fs = pcfs.PowerCutFS(os.path.join(t.tmpdir, "backing"), os.path.join(t.tmpdir, "mnt"))
    fs.mount()
    rng = random.Random(int(os.environ.get("MQD_PC_SEED", "20261201")))
    sets = {"segment_bytes": "256KiB"}
    b = t.broker(start=False, data_dir=os.path.join(fs.mnt, "data"), sets=sets)
    nb = t.broker(name="nosync", start=False, data_dir=os.path.join(fs.mnt, "nosync"), sets=sets)
    try:
        run_rounds(t, fs, b, ROUNDS, rng, "pc")
        # The file system catches a missing sync: the same rounds with a store that does
        # not sync its segments (tests/fault/nosync.so) lose nothing to SIGKILL alone...
        shim = os.path.join(os.environ.get("MQD_BUILDDIR", ""), "tests", "fault", "nosync.so")
        check(os.path.exists(shim), "%s is not built" % shim)
        os.environ["LD_PRELOAD"] = shim
        os.environ["ASAN_OPTIONS"] = os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"
        _, lost = run_rounds(t, fs, nb, 2, rng, "ns", cut=False)
        check(lost == 0, "the no-sync store lost %d messages to SIGKILL alone" % lost)
        # ...and acknowledged messages to a power cut
        total, lost = run_rounds(t, fs, nb, 2, rng, "nc", expect_loss=True)
        check(lost > 0, "the no-sync store lost nothing of %d accepted messages to power cuts: "
              "powercutfs did not catch the missing sync" % total)
        del os.environ["LD_PRELOAD"]
    finally:
        os.environ.pop("LD_PRELOAD", None)
        for x in (b, nb):
            if x.alive():
                x.kill()
        fs.unmount()


if __name__ == "__main__":
    mqdtest.main(body, timeout=240 + 45 * ROUNDS)
