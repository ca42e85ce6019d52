#!/usr/bin/env python3
"""browser.py URL --until JS --dom FILE --screenshot FILE --console FILE
                 [--then JS --then-out FILE]
                 [--timeout S] [--width W] [--height H] [--chromium PATH]

Opens URL in headless Chromium, driven through the DevTools protocol over a
pipe (--remote-debugging-pipe: no port, no websocket library), waits until
the JavaScript expression --until is true (checked every 0.25 s, at most
--timeout seconds, 30 by default), then writes the rendered DOM, a PNG
screenshot of the whole page and one line per console error, uncaught
exception or browser-reported error (failed loads, Content-Security-Policy
violations) to --console. With --then, the JavaScript expression JS is
evaluated once --until has held (before the DOM is written), and its value
written to --then-out as JSON. Exit 0 when --until held, 1 when it never did (the
files are written anyway), 2 when the browser did not answer.

Chromium runs with --no-sandbox (root has no sandbox) and a temporary
profile that is removed at the end; its own messages go to the file named by
the environment variable BROWSER_LOG, if set."""
import argparse
import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time


def high_pipe():
    """A pipe whose ends are above 9, so that moving them to 3 and 4 in
    the child cannot overwrite one another."""
    ends = []
    for fd in os.pipe():
        ends.append(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10))
        os.close(fd)
    return ends


class Browser:
    """One Chromium; commands and answers are NUL-terminated JSON on fds 3/4."""

    def __init__(self, chromium, width, height):
        self.profile = tempfile.mkdtemp(prefix="dlserve-chromium.")
        to_r, self.to_w = high_pipe()       # our commands: its fd 3
        self.from_r, from_w = high_pipe()   # its answers: its fd 4
        args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                "--hide-scrollbars", "--mute-audio", "--remote-debugging-pipe",
                "--user-data-dir=" + self.profile, "--window-size=%d,%d" % (width, height)]
        # The shell moves the pipe ends to 3 and 4, where Chromium looks.
        self.proc = subprocess.Popen(
            ["bash", "-c", 'exec "$0" "$@" 3<&%d 4>&%d %d<&- %d>&-' % (to_r, from_w, to_r, from_w),
             chromium] + args,
            pass_fds=(to_r, from_w), stdout=subprocess.DEVNULL, stderr=open(os.environ.get("BROWSER_LOG", os.devnull), "w"))
        os.close(to_r)
        os.close(from_w)
        self.buf = b""
        self.next_id = 0
        self.session = None
        self.errors = []

    def close(self):
        try:
            self.call("Browser.close", timeout=5, browser=True)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.to_w)
        os.close(self.from_r)
        shutil.rmtree(self.profile, ignore_errors=True)

    def _read(self, deadline):
        """The next message, or None at the deadline."""
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.from_r], [], [], left)[0]:
                return None
            chunk = os.read(self.from_r, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def _event(self, m):
        p = m.get("params", {})
        if m["method"] == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            self.errors.append("exception: " + d.get("exception", {}).get("description",
                                                                          d.get("text", "")))
        elif m["method"] == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
            self.errors.append("console.%s: %s" % (p["type"], " ".join(
                str(a.get("value", a.get("description", ""))) for a in p["args"])))
        elif m["method"] == "Log.entryAdded" and p["entry"]["level"] == "error":
            e = p["entry"]
            self.errors.append("%s: %s %s" % (e["source"], e["text"], e.get("url", "")))

    def call(self, method, params=None, timeout=15, browser=False):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if self.session and not browser:
            msg["sessionId"] = self.session
        os.write(self.to_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            m = self._read(deadline)
            if m is None:
                raise TimeoutError("%s: no answer in %g s" % (method, timeout))
            if "method" in m:
                self._event(m)
            elif m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError("%s: %s" % (method, m["error"]))
                return m["result"]

    def open(self, url):
        target = self.call("Target.createTarget", {"url": "about:blank"}, timeout=30)
        self.session = self.call("Target.attachToTarget",
                                 {"targetId": target["targetId"], "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            self.call(domain + ".enable")
        self.call("Page.navigate", {"url": url})

    def eval(self, expr):
        r = self.call("Runtime.evaluate", {"expression": expr, "returnByValue": True,
                                                "awaitPromise": True})
        return r.get("result", {}).get("value")

    def screenshot(self, width):
        size = self.call("Page.getLayoutMetrics")["cssContentSize"]
        height = int(size["height"]) + 1
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        self.eval("new Promise(r => requestAnimationFrame(() => r(1)))")
        shot = self.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True},
                         timeout=30)
        return base64.b64decode(shot["data"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--until", required=True)
    ap.add_argument("--dom", required=True)
    ap.add_argument("--screenshot", required=True)
    ap.add_argument("--console", required=True)
    ap.add_argument("--then")
    ap.add_argument("--then-out")
    ap.add_argument("--timeout", type=float, default=30)
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--height", type=int, default=900)
    ap.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    a = ap.parse_args()

    b = Browser(a.chromium, a.width, a.height)
    try:
        b.open(a.url)
        end = time.monotonic() + a.timeout
        held = False
        while not held and time.monotonic() < end:
            held = bool(b.eval(a.until))
            if not held:
                time.sleep(0.25)
        if a.then and held:
            with open(a.then_out, "w") as f:
                json.dump(b.eval(a.then), f)
        with open(a.dom, "w") as f:
            f.write(b.eval("document.documentElement.outerHTML") or "")
        with open(a.screenshot, "wb") as f:
            f.write(b.screenshot(a.width))
        b.eval("0")   # collects the events that came with the last answers
        with open(a.console, "w") as f:
            f.writelines(e + "\n" for e in b.errors)
    except (TimeoutError, RuntimeError, OSError) as e:
        print("browser.py:", e, file=sys.stderr)
        return 2
    finally:
        b.close()
    if not held:
        print("browser.py: %s never held in %g s" % (a.until, a.timeout), file=sys.stderr)
    return 0 if held else 1


sys.exit(main())
