"""powercutfs from Python: mount over a backing directory, send commands, cut, unmount.
Used by the power-cut tests (tests/fault/2*-*.py). Needs root and /dev/fuse; `skip_reason()`
says why a test cannot run here (the test then exits 77)."""

import os
import subprocess
import time


def binary():
    b = os.environ.get("POWERCUTFS_BIN")
    if not b and os.environ.get("MQD_BUILDDIR"):
        b = os.path.join(os.environ["MQD_BUILDDIR"], "tests", "fault", "powercutfs")
    return b


def skip_reason():
    b = binary()
    if not b or not os.access(b, os.X_OK):
        return "powercutfs is not built (libfuse3-dev missing at configure time?)"
    if os.geteuid() != 0:
        return "powercutfs needs root to mount"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    return None


class PowerCutFS:
    """One mount of powercutfs: BACKING holds the data, MNT shows it."""

    def __init__(self, backing, mnt, log_path=None):
        self.backing = backing
        self.mnt = mnt
        self.log_path = log_path or (mnt.rstrip("/") + ".pcfs.log")
        self.proc = None
        os.makedirs(backing, exist_ok=True)
        os.makedirs(mnt, exist_ok=True)

    def mount(self, timeout=15):
        lf = open(self.log_path, "ab")
        self.proc = subprocess.Popen([binary(), self.backing, self.mnt, "-f"],
                                     stdin=subprocess.DEVNULL, stdout=lf, stderr=subprocess.STDOUT)
        lf.close()
        deadline = time.monotonic() + timeout
        while not os.path.ismount(self.mnt):
            if self.proc.poll() is not None:
                raise RuntimeError("powercutfs exited with %s; see %s" % (self.proc.returncode, self.log_path))
            if time.monotonic() > deadline:
                raise RuntimeError("powercutfs did not mount %s within %ds" % (self.mnt, timeout))
            time.sleep(0.02)

    def ctl(self, cmd):
        with open(os.path.join(self.mnt, ".powercut"), "w") as f:
            f.write(cmd)

    def stats(self):
        """Counters; "pending" lists the directory changes a cut would undo."""
        out = {"pending": []}
        with open(os.path.join(self.mnt, ".powercut")) as f:
            for ln in f.read().splitlines():
                k, v = ln.split(" ", 1)
                if k == "pending":
                    out["pending"].append(v)
                else:
                    out[k] = int(v)
        return out

    def cut(self, torn_seed=None):
        self.ctl("cut" if torn_seed is None else "cut-torn %d" % torn_seed)

    def unmount(self, timeout=15):
        if self.proc is None:
            return
        subprocess.run(["umount", self.mnt], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=timeout)
            subprocess.run(["umount", "-l", self.mnt], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.proc = None

    def remount(self):
        self.unmount()
        self.mount()


def run_variant(test_file, mode="cut", env=None):
    """Runs an interop crash test (tests/interop/NAME) with every broker's data dir on
    powercutfs and a power cut after each SIGKILL (mqdtest's MQD_TEST_POWERCUT); returns
    its exit status (77 when powercutfs cannot run here). MQD_PC_MODE=cut|torn overrides
    `mode` (the long runs, tests/fault/longrun.sh)."""
    import sys
    why = skip_reason()
    if why:
        print("SKIP: " + why)
        return 77
    here = os.path.dirname(os.path.abspath(__file__))
    e = dict(os.environ, MQD_TEST_POWERCUT=os.environ.get("MQD_PC_MODE") or mode)
    e.update(env or {})
    return subprocess.call([sys.executable, os.path.join(here, "..", "interop", test_file)], env=e)
