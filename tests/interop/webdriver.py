"""A W3C WebDriver client over urllib for the console's browser tests (85-87): starts
Debian's chromedriver on a free loopback port, drives a headless Chromium, and stops
both (by the PIDs it started). No selenium: the protocol is JSON over HTTP."""

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import mqdtest
from mqdtest import check, log, skip

ELEMENT = "element-6066-11e4-a52e-4f735466cecf"


def artifacts_dir(name):
    """Where a browser test keeps its screenshots: MQD_TEST_ARTIFACTS, else
    tests/artifacts/NAME under the build dir."""
    d = os.environ.get("MQD_TEST_ARTIFACTS") or os.path.join(
        os.environ.get("MQD_BUILDDIR") or os.getcwd(), "tests", "artifacts", name)
    os.makedirs(d, exist_ok=True)
    return d


def find_binaries():
    drv = shutil.which("chromedriver") or ("/usr/bin/chromedriver" if os.path.exists("/usr/bin/chromedriver") else None)
    br = None
    for name in ("chromium", "chromium-browser", "google-chrome"):
        br = br or shutil.which(name)
    if not drv or not br:
        skip("chromium and chromium-driver are not installed (scripts/setup.sh installs them)")
    return drv, br


class Browser:
    def __init__(self, test, width=1280, height=900):
        drv, br = find_binaries()
        self.test = test
        self.port = mqdtest.free_port()
        self.profile = tempfile.mkdtemp(prefix="chromium-", dir=test.tmpdir)
        logpath = os.path.join(test.tmpdir, "chromedriver.log")
        self.proc = subprocess.Popen([drv, "--port=%d" % self.port, "--allowed-ips=127.0.0.1",
                                      "--log-path=" + logpath],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        test._procs.append(self.proc)
        self.base = "http://127.0.0.1:%d" % self.port
        deadline = time.time() + 30 * mqdtest.SLOW
        while True:
            try:
                self._call("GET", "/status")
                break
            except (OSError, urllib.error.URLError):
                check(time.time() < deadline and self.proc.poll() is None, "chromedriver did not start")
                time.sleep(0.2)
        caps = {"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": br, "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--disable-extensions", "--disable-background-networking",
                "--disable-sync", "--disable-component-update", "--user-data-dir=" + self.profile,
                "--window-size=%d,%d" % (width, height)]},
            "timeouts": {"script": int(30000 * mqdtest.SLOW), "pageLoad": int(60000 * mqdtest.SLOW)},
        }}}
        r = self._call("POST", "/session", caps, timeout=120 * mqdtest.SLOW)
        self.sid = r["sessionId"] if "sessionId" in r else r["value"]["sessionId"]
        log("webdriver session %s (chromedriver pid %d)" % (self.sid, self.proc.pid))

    def _call(self, method, path, body=None, timeout=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout or 60 * mqdtest.SLOW) as r:
                return json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            raise mqdtest.TestFailure("webdriver %s %s: %s %s" % (method, path, e.code, e.read()[:500]))

    def cmd(self, method, path, body=None):
        return self._call(method, "/session/%s%s" % (self.sid, path), body).get("value")

    def go(self, url):
        self.cmd("POST", "/url", {"url": url})

    def js(self, script, *args):
        return self.cmd("POST", "/execute/sync", {"script": script, "args": list(args)})

    def wait_js(self, script, what, timeout=20, *args):
        """Polls until the script returns a truthy value; returns it."""
        deadline = time.time() + timeout * mqdtest.SLOW
        last = None
        while time.time() < deadline:
            last = self.js(script, *args)
            if last:
                return last
            time.sleep(0.2)
        raise mqdtest.TestFailure("browser: timed out waiting for %s (last %r)" % (what, last))

    def find(self, css):
        v = self.cmd("POST", "/element", {"using": "css selector", "value": css})
        return v[ELEMENT]

    def click(self, css):
        self.cmd("POST", "/element/%s/click" % self.find(css), {})

    def type(self, css, text):
        el = self.find(css)
        self.cmd("POST", "/element/%s/clear" % el, {})
        self.cmd("POST", "/element/%s/value" % el, {"text": text})

    def keys(self, text):
        """Types into whatever has the focus (keyboard-only use)."""
        self.cmd("POST", "/actions", {"actions": [{"type": "key", "id": "kbd", "actions":
                  [a for ch in text for a in ({"type": "keyDown", "value": ch}, {"type": "keyUp", "value": ch})]}]})

    def cookies(self):
        return self.cmd("GET", "/cookie")

    def screenshot(self, path):
        png = base64.b64decode(self.cmd("GET", "/screenshot"))
        check(png[:8] == b"\x89PNG\r\n\x1a\n", "screenshot is not a PNG")
        with open(path, "wb") as f:
            f.write(png)
        log("screenshot %s (%d bytes)" % (path, len(png)))
        return len(png)

    def quit(self):
        try:
            self._call("DELETE", "/session/%s" % self.sid, timeout=30)
        except Exception as e:  # noqa: BLE001 - the process is stopped below anyway
            log("webdriver quit: %s" % e)
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
