"""mqdtest: shared harness for mqd's black-box interop tests (tests/interop/NN-*.py).

Each test is a script run by /usr/bin/python3 (Debian's, with python3-qpid-proton and
python3-uamqp). It calls mqdtest.main(body, timeout=...), where body(t) gets a Test:

    t.broker(sets={...})      start an mqd on a free 127.0.0.1 port with its own data dir
    b.url / b.port / b.pid    where it listens
    b.stop() / b.kill()       SIGTERM (then SIGKILL after a grace) / SIGKILL, by PID
    b.restart(kill=True)      kill (or stop) and start again on the same data dir and port
    b.rss_kib()               VmRSS from /proc/PID/status
    t.tmpdir                  the test's temp dir (removed on success; kept on failure)
    t.spawn(argv)             start a helper process (stopped by PID at the end)
    run_container(h, timeout) run a proton Container with handler h until h.done
    check(cond, msg)          fail the test with msg unless cond

Exit status: 0 pass, 1 fail (with the reason and the broker logs), 77 skip.
The broker binary is $MQD_BIN, else $MQD_BUILDDIR/mqd (set by `make check`).
Only loopback addresses are used. Every wait is bounded; main() also has a hard
timeout (SIGALRM, then a watchdog thread that kills what we started and exits).
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

SKIP = 77

# A sanitizer build is slower; let the environment stretch every timeout.
SLOW = float(os.environ.get("MQD_TEST_SLOW", "1") or "1")
# MQD_TEST_POWERCUT=cut|torn: every broker's data dir lives on its own powercutfs mount
# (tests/fault/powercutfs), and a start that follows a SIGKILL first cuts power (torn:
# every other cut is cut-torn). The power-cut variants of the crash tests set it.
POWERCUT = os.environ.get("MQD_TEST_POWERCUT", "")
# The long runs (tests/fault/longrun.sh): MQD_PC_SEED varies the cut-torn seeds, and
# MQD_TEST_REPEAT=N runs a test's whole body N times in one process, each time with a fresh
# Test (temp dir, brokers, powercutfs mounts). Power cuts are counted per process, so a
# test with one cut per body still alternates cut and cut-torn across repetitions.
PC_SEED = int(os.environ.get("MQD_PC_SEED", "0") or "0")
REPEAT = max(1, int(os.environ.get("MQD_TEST_REPEAT", "1") or "1"))
_power_cuts = [0]


class TestFailure(Exception):
    pass


class TestSkip(Exception):
    pass


class TestTimeout(TestFailure):
    pass


def check(cond, msg):
    if not cond:
        raise TestFailure(msg)


class Collect:
    """Runs independent sub-cases, recording failures, so one broker bug does not hide
    the next: `with coll.case("name"): ...`; coll.finish() fails with all of them."""

    def __init__(self):
        self.failures = []

    def case(self, name):
        coll = self

        class _Case:
            def __enter__(self):
                log("--- case: %s" % name)

            def __exit__(self, et, ev, tb):
                if et is not None and issubclass(et, TestFailure) and not issubclass(et, TestTimeout):
                    log("case %s FAILED: %s" % (name, ev))
                    coll.failures.append("%s: %s" % (name, ev))
                    return True
                return False
        return _Case()

    def finish(self):
        if self.failures:
            raise TestFailure("%d case(s) failed:\n  " % len(self.failures) + "\n  ".join(self.failures))


def fail(msg):
    raise TestFailure(msg)


def skip(msg):
    raise TestSkip(msg)


def log(*args):
    print("[%7.2f]" % (time.monotonic() - _T0), *args, flush=True)


_T0 = time.monotonic()


def mqd_bin():
    b = os.environ.get("MQD_BIN")
    if not b and os.environ.get("MQD_BUILDDIR"):
        b = os.path.join(os.environ["MQD_BUILDDIR"], "mqd")
    if not b:
        skip("broker binary unknown: set MQD_BIN (or run through `make check`)")
    if not (os.path.isfile(b) and os.access(b, os.X_OK)):
        fail("broker binary %s does not exist or is not executable" % b)
    return b


def mqctl_bin():
    """build/mqctl (MQCTL_BIN, else next to the broker in MQD_BUILDDIR), or None."""
    b = os.environ.get("MQCTL_BIN") or os.path.join(os.environ.get("MQD_BUILDDIR", ""), "mqctl")
    return b if os.access(b, os.X_OK) else None


def mqctl(url, *args, bin=None):
    """Runs mqctl against url: (exit code, stdout, stderr); skips the test if not built."""
    b = bin or mqctl_bin()
    if not b:
        skip("mqctl not built (set MQCTL_BIN or MQD_BUILDDIR)")
    argv = [b, "--url", url, "--timeout", str(10 * SLOW)] + list(args)
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60 * SLOW)
    log("mqctl %s -> %d %s" % (" ".join(args), p.returncode, p.stderr.decode().strip()))
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def free_port():
    """A port that was free on 127.0.0.1 a moment ago (bind port 0)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
    finally:
        s.close()


def wait_port(port, timeout, proc=None, what="broker"):
    """Wait until 127.0.0.1:port accepts a TCP connection (bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            fail("%s exited with status %s before accepting connections" % (what, proc.returncode))
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=1)
            s.close()
            return
        except OSError:
            time.sleep(0.05)
    fail("%s did not accept connections on 127.0.0.1:%d within %.0fs" % (what, port, timeout))


def describe_status(rc):
    if rc is None:
        return "still running"
    if rc < 0:
        try:
            return "killed by signal %d (%s)" % (-rc, signal.Signals(-rc).name)
        except ValueError:
            return "killed by signal %d" % -rc
    return "exit status %d" % rc


def _terminate(proc, grace=10.0):
    """SIGTERM the process we started, then SIGKILL after `grace` seconds."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.kill(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


class Broker:
    """One mqd process (restartable) with its own data dir and port."""

    def __init__(self, test, name, sets=None, args=(), conf=None, data_dir=None):
        self.test = test
        self.name = name
        self.bin = mqd_bin()
        self.sets = dict(sets or {})
        self.args = list(args)
        self.conf = conf
        self.fs = None
        self.cuts = 0
        if POWERCUT and data_dir is None:
            self.fs = _powercut_mount(test, name)
            data_dir = os.path.join(self.fs.mnt, "data")
        self.data_dir = data_dir or os.path.join(test.tmpdir, name + "-data")
        os.makedirs(self.data_dir, exist_ok=True)
        self.port = free_port()
        self.proc = None
        self.starts = 0
        self.logs = []  # log file paths, one per start
        self.procs = []  # Popen per start

    @property
    def url(self):
        return "amqp://127.0.0.1:%d" % self.port

    @property
    def hostport(self):
        return "127.0.0.1:%d" % self.port

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def argv(self):
        a = [self.bin, "--foreground", "--listen", self.hostport, "--data-dir", self.data_dir]
        if self.conf:
            a += ["-c", self.conf]
        for k, v in self.sets.items():
            a += ["--set", "%s=%s" % (k, v)]
        return a + self.args

    def start(self, ready_timeout=30):
        check(self.proc is None or self.proc.poll() is not None, "broker %s already running" % self.name)
        if self.fs is not None and self.proc is not None and self.proc.returncode == -signal.SIGKILL:
            self.power_cut()
        self.starts += 1
        logpath = os.path.join(self.test.tmpdir, "%s.%d.log" % (self.name, self.starts))
        self.logs.append(logpath)
        argv = self.argv()
        log("start broker %s: %s" % (self.name, " ".join(argv)))
        with open(logpath, "wb") as lf:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=lf, stderr=subprocess.STDOUT)
        self.test._procs.append(self.proc)
        self.procs.append(self.proc)
        wait_port(self.port, ready_timeout * SLOW, self.proc, "mqd %s" % self.name)
        log("broker %s ready (pid %d, %s)" % (self.name, self.proc.pid, self.url))
        return self

    @property
    def exits(self):
        return [p.poll() for p in self.procs]

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def check_alive(self, when=""):
        if not self.alive():
            fail("broker %s died%s (%s)" % (self.name, " " + when if when else "",
                                            describe_status(self.proc.returncode) if self.proc else "never started"))

    def stop(self, grace=10.0):
        if self.proc is not None:
            _terminate(self.proc, grace)
            log("broker %s stopped (status %s)" % (self.name, self.proc.returncode))

    def kill(self):
        self.check_alive("before it was to be SIGKILLed")
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
            log("broker %s SIGKILLed" % self.name)

    def power_cut(self):
        """Cuts power under the (dead) broker's data dir, then remounts it."""
        self.cuts += 1
        _power_cuts[0] += 1
        n = _power_cuts[0]
        torn = POWERCUT == "torn" and n % 2 == 0
        st = self.fs.stats()
        self.fs.cut(torn_seed=PC_SEED + n * 7919 if torn else None)
        self.fs.remount()
        log("broker %s: %s #%d (%d dirty files, %d directory changes undone)"
            % (self.name, "cut-torn" if torn else "power cut", n, st["dirty_files"],
               st["pending_dir_changes"]))

    def restart(self, kill=True):
        self.kill() if kill else self.stop()
        return self.start()

    def rss_kib(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        fail("no VmRSS for pid %d" % self.proc.pid)

    def log_text(self):
        out = []
        for p in self.logs:
            try:
                with open(p, "rb") as f:
                    out.append("----- %s -----\n%s" % (os.path.basename(p), f.read().decode("utf-8", "replace")))
            except OSError:
                pass
        return "\n".join(out)


def _powercut_mount(test, name):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fault"))
    import pcfs
    why = pcfs.skip_reason()
    if why:
        skip("MQD_TEST_POWERCUT: " + why)
    fs = pcfs.PowerCutFS(os.path.join(test.tmpdir, name + "-backing"), os.path.join(test.tmpdir, name + "-pcfs"))
    fs.mount()
    return fs


class Test:
    def __init__(self, name):
        self.name = name
        self.tmpdir = tempfile.mkdtemp(prefix="mqd-%s-" % name)
        self.brokers = []
        self._procs = []

    def broker(self, name=None, start=True, **kw):
        b = Broker(self, name or "mqd%d" % (len(self.brokers) + 1), **kw)
        self.brokers.append(b)
        if start:
            b.start()
        return b

    def spawn(self, argv, **kw):
        """Start a helper process; it is stopped by PID when the test ends."""
        kw.setdefault("stdin", subprocess.DEVNULL)
        p = subprocess.Popen(argv, **kw)
        self._procs.append(p)
        return p

    def cleanup(self):
        for p in reversed(self._procs):
            _terminate(p, grace=5.0)
        for b in self.brokers:
            if b.fs is not None:
                b.fs.unmount()

    def dump_logs(self):
        for b in self.brokers:
            sys.stdout.write(b.log_text()[-60000:] + "\n")
        sys.stdout.flush()


# ---------------------------------------------------------------- proton helpers

try:
    from proton import Delivery, Message, symbol  # noqa: F401
    from proton.handlers import MessagingHandler
    from proton.reactor import Container
    HAVE_PROTON = True
except ImportError:  # pragma: no cover
    HAVE_PROTON = False
    MessagingHandler = object


class _Ticker:
    """Polls handler.done; stops the container when it is set or time is up."""

    def __init__(self, container, handler, timeout):
        self.container = container
        self.handler = handler
        self.deadline = time.monotonic() + timeout
        self.timed_out = False

    def on_timer_task(self, event):
        if getattr(self.handler, "done", False):
            self.container.stop()
            return
        if time.monotonic() > self.deadline:
            self.timed_out = True
            try:
                for c in getattr(self.handler, "conns", []):
                    c.close()
            except Exception:
                pass
            self.container.stop()
            return
        self.container.schedule(0.05, self)


def run_container(handler, timeout, **kw):
    """Run a proton Container with `handler` until handler.done is true (checked every
    50 ms) or `timeout` seconds pass (then TestTimeout with handler.status())."""
    timeout *= SLOW
    c = Container(handler, **kw)
    t = _Ticker(c, handler, timeout)
    c.schedule(0.05, t)
    c.run()
    err = getattr(handler, "error", None)
    if err:
        raise TestFailure(err)
    if t.timed_out:
        st = handler.status() if hasattr(handler, "status") else ""
        raise TestTimeout("timed out after %.0fs: %s" % (timeout, st))


class Client(MessagingHandler):
    """Base for test handlers: tracks its connections; done once all are closed.
    Subclasses call self.finish() to close everything, self.fail(msg) to abort."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.done = False
        self.error = None
        self.conns = []
        self.closed = set()

    def connect(self, container, url, **kw):
        kw.setdefault("reconnect", False)
        c = container.connect(url, **kw)
        self.conns.append(c)
        return c

    def finish(self):
        for c in self.conns:
            c.close()
        self._maybe_done()

    def fail(self, msg):
        if not self.error:
            self.error = msg
        self.finish()
        self.done = True

    def _maybe_done(self):
        from proton import Endpoint
        if all(id(c) in self.closed or (c.state & Endpoint.REMOTE_CLOSED and c.state & Endpoint.LOCAL_CLOSED)
               for c in self.conns):
            self.done = True

    def on_connection_closed(self, event):
        self.closed.add(id(event.connection))
        self._maybe_done()

    def on_transport_closed(self, event):
        if event.connection is not None:
            self.closed.add(id(event.connection))
            if not (event.connection.state & event.connection.LOCAL_CLOSED) and not self.error:
                cond = event.transport.condition
                self.error = "connection lost unexpectedly: %s" % (cond,)
        self._maybe_done()

    def on_connection_error(self, event):
        if not self.error:
            self.error = "connection error: %s" % (event.connection.remote_condition,)
        event.connection.close()

    def on_link_error(self, event):
        if not self.error:
            self.error = "link %s error: %s" % (event.link.name, event.link.remote_condition)
        self.finish()

    def on_session_error(self, event):
        if not self.error:
            self.error = "session error: %s" % (event.session.remote_condition,)
        self.finish()

    def status(self):
        return ""


def ann(msg, key, default=None):
    """A message annotation by (symbol) name."""
    a = msg.annotations or {}
    for k, v in a.items():
        if str(k) == key:
            return v
    return default


def check_delivery_annotations(msg, partition=None, pkey=None, now=None, where=""):
    """Checks the x-opt-* annotations that mqd adds to every delivered message;
    returns (partition_id, offset)."""
    from proton import timestamp, int32
    a = msg.annotations
    check(isinstance(a, dict), "%s: no message-annotations on a delivered message" % where)
    pid = ann(msg, "x-opt-partition-id")
    off = ann(msg, "x-opt-offset")
    seq = ann(msg, "x-opt-sequence-number")
    enq = ann(msg, "x-opt-enqueued-time")
    check(pid is not None and off is not None and seq is not None and enq is not None,
          "%s: missing x-opt-* annotations: %r" % (where, a))
    check(type(pid) is int32, "%s: x-opt-partition-id is %s, want AMQP int" % (where, type(pid).__name__))
    check(isinstance(off, str), "%s: x-opt-offset is %s, want string" % (where, type(off).__name__))
    check(type(seq) is int, "%s: x-opt-sequence-number is %s, want AMQP long" % (where, type(seq).__name__))
    check(type(enq) is timestamp, "%s: x-opt-enqueued-time is %s, want timestamp" % (where, type(enq).__name__))
    check(off == str(seq), "%s: x-opt-offset %r != x-opt-sequence-number %r" % (where, off, seq))
    if now is not None:
        check(abs(int(enq) - now * 1000) < 120000, "%s: x-opt-enqueued-time %d far from now %d"
              % (where, int(enq), now * 1000))
    if partition is not None:
        check(pid == partition, "%s: x-opt-partition-id %r, want %r" % (where, pid, partition))
    if pkey is not None:
        check(ann(msg, "x-opt-partition-key") == pkey, "%s: x-opt-partition-key %r, want %r"
              % (where, ann(msg, "x-opt-partition-key"), pkey))
    return int(pid), int(seq)


# ---------------------------------------------------------------- entry point

def _check_brokers_at_end(t):
    for b in t.brokers:
        if b.proc is not None and b.proc.poll() is not None and b.proc.returncode not in (0, -9, -15):
            fail("broker %s exited with status %s during the test" % (b.name, b.proc.returncode))
    # a clean SIGTERM shutdown exits 0; anything else is a crash at shutdown or,
    # in the sanitizer build, a LeakSanitizer report
    for b in t.brokers:
        if b.alive():
            b.stop()
            if b.proc.returncode != 0:
                fail("broker %s exited with status %s after SIGTERM (crash or leak at "
                     "shutdown)" % (b.name, describe_status(b.proc.returncode)))


def main(body, timeout=120, name=None):
    """Runs body(Test) with a hard timeout (MQD_TEST_REPEAT times over); exits 0 / 1 / 77."""
    name = name or os.path.splitext(os.path.basename(sys.argv[0]))[0]
    timeout = timeout * SLOW * REPEAT
    if not HAVE_PROTON:
        print("SKIP: python3-qpid-proton is not importable by %s" % sys.executable)
        sys.exit(SKIP)
    t = None
    status = 1
    why = []  # the failure, repeated after the broker logs (CI shows a log's tail)

    def on_alarm(signum, frame):
        raise TestTimeout("hard timeout of %.0fs reached" % timeout)

    def watchdog():
        # Backstop if the alarm cannot interrupt (e.g. blocked in C): kill what we
        # started, by PID, and exit.
        time.sleep(timeout + 30)
        print("FAIL: %s: watchdog: test hung past its hard timeout" % name, flush=True)
        try:
            if t is not None:
                for p in t._procs:
                    if p.poll() is None:
                        os.kill(p.pid, signal.SIGKILL)
                t.dump_logs()
        finally:
            os._exit(1)

    threading.Thread(target=watchdog, daemon=True).start()
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(int(timeout))
    try:
        t = Test(name)
        for rep in range(REPEAT):
            if rep:
                # the previous repetition passed: drop its brokers, mounts and files
                t.cleanup()
                shutil.rmtree(t.tmpdir, ignore_errors=True)
                t.__init__(name)
                log("repetition %d of %d" % (rep + 1, REPEAT))
            log("test %s: tmpdir %s" % (name, t.tmpdir))
            body(t)
            _check_brokers_at_end(t)
        signal.alarm(0)
        status = 0
        print("PASS: %s" % name)
    except TestSkip as e:
        signal.alarm(0)
        status = SKIP
        print("SKIP: %s: %s" % (name, e))
    except TestFailure as e:
        signal.alarm(0)
        print("FAIL: %s: %s" % (name, e))
        why.append("%s" % e)
        traceback.print_exc(file=sys.stdout)
    except BaseException as e:  # noqa: B902 - report anything as a failure
        signal.alarm(0)
        print("FAIL: %s: unexpected %s: %s" % (name, type(e).__name__, e))
        why.append("unexpected %s: %s" % (type(e).__name__, e))
        traceback.print_exc(file=sys.stdout)
    finally:
        signal.alarm(0)
        if t is not None:
            try:
                t.cleanup()
            except Exception as e:
                print("cleanup error: %s" % e)
            if status == 1:
                for b in t.brokers:
                    print("broker %s argv: %s" % (b.name, " ".join(b.argv())))
                    for i, rc in enumerate(b.exits):
                        if rc is not None and rc not in (0, -signal.SIGKILL, -signal.SIGTERM):
                            print("NOTE: broker %s (start %d) died on its own: %s"
                                  % (b.name, i + 1, describe_status(rc)))
                t.dump_logs()
                print("(temp dir kept: %s)" % t.tmpdir)
                for w in why:
                    print("failed (repeated after the logs): %s" % w)
            elif os.environ.get("MQD_KEEP"):
                print("(temp dir kept: %s)" % t.tmpdir)
            else:
                shutil.rmtree(t.tmpdir, ignore_errors=True)
        sys.stdout.flush()
    sys.exit(status)


# ---------------------------------------------------------------- reusable clients

class Sender(Client):
    """Sends `messages` (proton Messages) to `address`, pipelined over link credit,
    unsettled; done once every one is settled by the broker. Records the outcomes."""

    def __init__(self, url, address, messages, presettle=False):
        super().__init__()
        self.url = url
        self.address = address
        self.messages = list(messages)
        self.sent = 0
        self.accepted = 0
        self.outcomes = []  # (index, state, condition) for anything not accepted
        self.tracker_index = {}
        self.presettle = presettle
        self.link_condition = None

    def on_start(self, event):
        conn = self.connect(event.container, self.url)
        opts = None
        if self.presettle:
            from proton.reactor import AtMostOnce
            opts = AtMostOnce()
        self.sender = event.container.create_sender(conn, self.address, options=opts)

    def on_sendable(self, event):
        while event.sender.credit and self.sent < len(self.messages):
            d = event.sender.send(self.messages[self.sent])
            self.tracker_index[id(d)] = self.sent
            self.sent += 1
        if self.presettle and self.sent == len(self.messages):
            self.finish()

    def _settled(self, event, ok):
        if ok:
            self.accepted += 1
        else:
            d = event.delivery
            self.outcomes.append((self.tracker_index.get(id(d)), d.remote_state, d.remote.condition))
        if self.accepted + len(self.outcomes) == len(self.messages):
            self.finish()

    def on_accepted(self, event):
        self._settled(event, True)

    def on_rejected(self, event):
        self._settled(event, False)

    def on_released(self, event):
        self._settled(event, False)

    def on_modified(self, event):
        self._settled(event, False)

    def on_link_error(self, event):
        self.link_condition = event.link.remote_condition
        Client.on_link_error(self, event)

    def status(self):
        return "sent %d, accepted %d, other outcomes %d, of %d" % (
            self.sent, self.accepted, len(self.outcomes), len(self.messages))



class TrackingSender(Sender):
    """A Sender that remembers which message indexes were accepted (ok, in settlement
    order) and which not (outcomes), by delivery tag."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.ok = []
        self.by_tag = {}

    def on_sendable(self, event):
        while event.sender.credit and self.sent < len(self.messages):
            d = event.sender.send(self.messages[self.sent])
            self.by_tag[d.tag] = self.sent
            self.sent += 1

    def on_accepted(self, event):
        self.ok.append(self.by_tag.get(event.delivery.tag))
        super().on_accepted(event)

    def on_rejected(self, event):
        self.outcomes.append((self.by_tag.get(event.delivery.tag), "rejected",
                              event.delivery.remote.condition))
        if self.accepted + len(self.outcomes) == len(self.messages):
            self.finish()

def send(url, address, messages, timeout=60):
    """Sends and asserts every message was accepted; returns the Sender."""
    s = Sender(url, address, messages)
    run_container(s, timeout)
    check(not s.outcomes, "sends to %s not accepted: %s" % (address, s.outcomes[:5]))
    check(s.accepted == len(s.messages), "%d of %d sends to %s accepted"
          % (s.accepted, len(s.messages), address))
    return s


class Receiver(Client):
    """Receives from `address`.

    credit:  None = prefetch window of 100 (topped up as messages arrive); an int =
             exactly that much credit granted once (prefetch 0), more only via grant().
    count:   stop after this many deliveries (then linger `linger` seconds, recording
             anything more that arrives, then close).
    idle:    with count None: stop once nothing arrived for `idle` seconds.
    settle:  policy(receiver, message, delivery) -> 'accept' | 'release' | 'modify' |
             'modify-failed' | 'reject' | None (leave unsettled); default accept.
    close:   'connection' (close the connection), 'link' (detach the link and wait for
             the broker's detach, then close the connection).
    options: proton LinkOptions for create_receiver (e.g. Copy()), or a list of them.
    dynamic: attach with a dynamic source (address None).
    """

    def __init__(self, url, address, count=None, credit=None, linger=0.0, idle=None,
                 settle=None, close="connection", options=None, name=None):
        super().__init__(prefetch=0 if credit is not None else 100, auto_accept=False)
        self.url = url
        self.address = address
        self.count = count
        self.credit = credit
        self.linger = linger
        self.idle = idle
        self.policy = settle
        self.close_mode = close
        self.options = options
        self.name = name
        self.got = []           # proton Messages, in arrival order
        self.deliveries = []    # matching Delivery objects
        self.unsettled = []     # deliveries left unsettled
        self.last_arrival = time.monotonic()
        self.closing = False
        self.link_closed = False
        self.on_each = None     # optional callback(self, message, delivery)

    def on_start(self, event):
        self.container = event.container
        self.conn = self.connect(event.container, self.url)
        self.receiver = event.container.create_receiver(self.conn, self.address, name=self.name,
                                                        options=self.options)
        if self.credit:
            self.receiver.flow(self.credit)
        if self.idle is not None:
            event.container.schedule(self.idle, self)

    def grant(self, n):
        self.receiver.flow(n)

    def on_message(self, event):
        if self.closing:
            self.late = getattr(self, "late", 0) + 1
        self.last_arrival = time.monotonic()
        m, d = event.message, event.delivery
        self.got.append(m)
        self.deliveries.append(d)
        action = self.policy(self, m, d) if self.policy else "accept"
        apply_outcome(d, action, self.unsettled)
        if self.on_each:
            self.on_each(self, m, d)
        if self.count is not None and len(self.got) == self.count and not self.closing:
            self.closing = True
            if self.linger:
                event.container.schedule(self.linger, _Call(self.close_now))
            else:
                self.close_now()

    def on_timer_task(self, event):
        # idle watch
        if self.closing:
            return
        quiet = time.monotonic() - self.last_arrival
        if quiet >= self.idle:
            self.closing = True
            self.close_now()
        else:
            event.container.schedule(self.idle - quiet + 0.01, self)

    def close_now(self):
        if self.close_mode == "link":
            self.receiver.close()
        else:
            self.finish()

    def on_link_closed(self, event):
        if event.link.name == self.receiver.name:
            self.link_closed = True
            if self.close_mode == "link" and self.closing:
                self.finish()

    def on_link_error(self, event):
        self.link_error = event.link.remote_condition
        Client.on_link_error(self, event)

    def bodies(self):
        return [m.body for m in self.got]

    def status(self):
        return "received %d%s from %s" % (len(self.got), "" if self.count is None else " of %d" % self.count,
                                          self.address)


class _Call:
    def __init__(self, fn):
        self.fn = fn

    def on_timer_task(self, event):
        self.fn()


def apply_outcome(d, action, unsettled=None):
    from proton import Delivery
    if action is None:
        if unsettled is not None:
            unsettled.append(d)
        return
    if action == "accept":
        d.update(Delivery.ACCEPTED)
    elif action == "release":
        d.update(Delivery.RELEASED)
    elif action == "modify":
        d.update(Delivery.MODIFIED)
    elif action == "modify-failed":
        d.local.failed = True
        d.update(Delivery.MODIFIED)
    elif action == "reject":
        d.update(Delivery.REJECTED)
    else:
        raise ValueError(action)
    d.settle()


def receive(url, address, count=None, timeout=60, **kw):
    r = Receiver(url, address, count=count, **kw)
    run_container(r, timeout)
    return r


# ---------------------------------------------------------------- partitioning, offsets, filters

def fill_disk(dirpath, leave):
    """Writes dirpath/filler until only `leave` bytes are free on its file system (a small
    tmpfs the test mounted): the disk-full tests' way of making the broker's next write fail."""
    st = os.statvfs(dirpath)
    want = st.f_bavail * st.f_frsize - leave
    chunk = b"\0" * (1 << 20)
    with open(os.path.join(dirpath, "filler"), "wb") as f:
        while want > 0:
            n = min(want, len(chunk))
            try:
                f.write(chunk[:n])
                f.flush()
            except OSError:
                break
            want -= n
    st = os.statvfs(dirpath)
    log("filled %s: %d bytes free" % (dirpath, st.f_bavail * st.f_frsize))


def murmur2(data):
    """Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2) as an unsigned 32-bit
    value; bytes or str (UTF-8)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    m, r, mask = 0x5bd1e995, 24, 0xffffffff
    n = len(data)
    h = (0x9747b28c ^ n) & mask
    for i in range(n // 4):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = (k * m) & mask
        k ^= k >> r
        k = (k * m) & mask
        h = (h * m) & mask
        h ^= k
    tail, rem = n & ~3, n % 4
    if rem == 3:
        h ^= data[tail + 2] << 16
    if rem >= 2:
        h ^= data[tail + 1] << 8
    if rem >= 1:
        h ^= data[tail]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h


def kafka_partition(key, nparts):
    """The partition Kafka's default partitioner picks for `key` among `nparts`."""
    return (murmur2(key) & 0x7fffffff) % nparts


def check_murmur2():
    """Known values from Kafka's UtilsTest (signed there)."""
    for key, want in (("21", -973932308), ("foobar", -790332482), ("abc", 479470107),
                      ("a-little-bit-long-string", -985981536),
                      ("a-little-bit-longer-string", -1486304829),
                      ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971)):
        got = murmur2(key)
        got = got - (1 << 32) if got >= 1 << 31 else got
        check(got == want, "test's murmur2(%r) = %d, want %d" % (key, got, want))


def group_offsets(data_dir, topic, group):
    """{partition: next_offset} committed for (topic, group) in DATA_DIR/meta.db, read
    with a short read-only connection (None if the table or file is missing)."""
    import sqlite3
    path = os.path.join(data_dir, "meta.db")
    if not os.path.exists(path):
        return None
    try:
        db = sqlite3.connect("file:%s?mode=ro" % path, uri=True, timeout=5)
        try:
            rows = db.execute("SELECT partition, next_offset FROM group_offsets WHERE topic = ? "
                              "AND grp = ? COLLATE NOCASE", (topic, group)).fetchall()
        finally:
            db.close()
    except sqlite3.Error as e:
        log("group_offsets(%s): %s" % (path, e))
        return None
    return {int(p): int(o) for p, o in rows}


def data_to_py(data):
    """A proton Data (e.g. link.remote_source.filter) as a Python object, or None."""
    if data is None:
        return None
    data.rewind()
    if data.next() is None:
        return None
    return data.get_object()



class FastFailReceiver(Receiver):
    """Receiver that ends at once when its connection is lost (broker crash, refused
    connection) instead of waiting for its timeout."""

    def on_transport_closed(self, event):
        Receiver.on_transport_closed(self, event)
        if self.error:
            self.done = True


def receive_ff(url, address, count=None, timeout=60, **kw):
    """receive() with a FastFailReceiver."""
    r = FastFailReceiver(url, address, count=count, **kw)
    run_container(r, timeout)
    return r


# ---------------------------------------------------------------- transactions (blocking)

class CoordinatorTarget(object):
    """LinkOption: the link's target is a transaction coordinator (amqp:local-transactions)."""

    def apply(self, link):
        from proton import Terminus
        link.target.type = Terminus.COORDINATOR
        link.target.capabilities.put_object(symbol("amqp:local-transactions"))

    def test(self, link):
        return True


TXN_STATE = 0x34       # amqp:transactional-state:list
TXN_DECLARED = 0x33    # amqp:declared:list


class BlockingTxns:
    """Local transactions over a proton BlockingConnection, driven by hand (coordinator
    sender link, raw declare / discharge bodies), so a test can pipeline transactional
    sends and inspect every outcome:

        bt = BlockingTxns(conn)           # attaches the coordinator link
        tid = bt.declare()                # bytes txn-id
        d = bt.send(sender_link, msg, tid)    # transactional transfer (not waited for)
        bt.wait_settled([d, ...])         # all settled by the broker
        bt.accept(delivery, tid)          # transactional accept of a received delivery
        ok, state, cond = bt.discharge(tid, fail=False)
    """

    _serial = 0

    def __init__(self, conn, timeout=30):
        from proton.utils import BlockingSender
        self.conn = conn
        self.timeout = timeout * SLOW
        # a name no other coordinator link of this process had: id(self) is reused once an
        # earlier BlockingTxns is collected, while its link may still be attached
        BlockingTxns._serial += 1
        self.coord = conn.create_sender(None, name="txn-ctrl-%d-%d" % (os.getpid(), BlockingTxns._serial),
                                        options=CoordinatorTarget())
        check(isinstance(self.coord, BlockingSender), "coordinator link not a sender")

    def _ctrl(self, descriptor, value):
        from proton import Described
        d = self.coord.link.send(Message(body=Described(symbol(descriptor), value)))
        self.conn.wait(lambda: d.remote_state != 0 or d.settled or self.coord.link.state & 0x20,
                       timeout=self.timeout, msg="coordinator outcome for %s" % descriptor)
        return d

    def declare(self):
        d = self._ctrl("amqp:declare:list", [None])
        check(d.remote_state == TXN_DECLARED and d.remote.data,
              "declare: outcome %s data %r condition %s" % (d.remote_state, d.remote.data, d.remote.condition))
        tid = d.remote.data[0]
        d.settle()
        return tid

    def discharge(self, tid, fail=False):
        """Returns (accepted?, remote_state, remote condition)."""
        from proton import Delivery
        d = self._ctrl("amqp:discharge:list", [tid, bool(fail)])
        st, cond = d.remote_state, d.remote.condition
        d.settle()
        return st == Delivery.ACCEPTED, st, cond

    @staticmethod
    def send(sender, msg, tid):
        """A transactional transfer on a BlockingSender / proton Sender (not waited for)."""
        link = getattr(sender, "link", sender)
        d = link.send(msg)
        d.local.data = [tid]
        d.update(TXN_STATE)
        return d

    def wait_settled(self, deliveries, what="transactional sends"):
        self.conn.wait(lambda: all(d.remote_state != 0 or d.settled for d in deliveries),
                       timeout=self.timeout, msg=what)
        out = []
        for d in deliveries:
            out.append((d.remote_state, d.remote.data, d.remote.condition))
            d.settle()
        return out

    @staticmethod
    def accept(delivery, tid, outcome=0x24, settle=True):
        """Transactional disposition (default accepted) of a received delivery."""
        from proton import Described, ulong
        delivery.local.data = [tid, Described(ulong(outcome), [])]
        delivery.update(TXN_STATE)
        if settle:
            delivery.settle()


def txn_outcome_ok(state, data, tid):
    """A transactional send's outcome: transactional-state(tid, accepted)."""
    if state != TXN_STATE or not data:
        return False
    try:
        d0 = data[0]
        out = data[1] if len(data) > 1 else None
    except (TypeError, IndexError):
        return False
    if bytes(d0) != bytes(tid):
        return False
    desc = getattr(out, "descriptor", None)
    return desc in (0x24, symbol("amqp:accepted:list"))
