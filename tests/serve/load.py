#!/usr/bin/env python3
"""load.py URL BODY SECONDS THREADS OUT [--close] [--stop-on-503]: a load
generator of POST requests with http.client, THREADS at a time, for
SECONDS (or until the file OUT.stop exists). Writes to OUT a JSON summary:
answers by status code, "refused" (connection not accepted) and "dropped"
(a request sent on an accepted connection that got no HTTP answer). With
--stop-on-503 every thread stops issuing requests once the server has
said 503 or refused a connection (it is shutting down)."""
import http.client
import json
import os
import sys
import threading
import time
from urllib.parse import urlparse

url, body_file, seconds, threads, out = sys.argv[1:6]
close = "--close" in sys.argv
stop_on_503 = "--stop-on-503" in sys.argv
stopping = threading.Event()
u = urlparse(url)
body = open(body_file, "rb").read()
deadline = time.time() + float(seconds)
lock = threading.Lock()
result = {"codes": {}, "refused": 0, "dropped": 0, "requests": 0}


def count(key, sub=None):
    with lock:
        if sub is None:
            result[key] += 1
        else:
            result[key][sub] = result[key].get(sub, 0) + 1


def worker():
    conn = None
    while time.time() < deadline and not os.path.exists(out + ".stop") and not stopping.is_set():
        if conn is None:
            conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
            try:
                conn.connect()
            except OSError:
                count("refused")
                if stop_on_503:
                    stopping.set()
                conn = None
                time.sleep(0.01)
                continue
        try:
            headers = {"Content-Type": "application/json"}
            if close:
                headers["Connection"] = "close"
            conn.request("POST", u.path, body, headers)
            resp = conn.getresponse()
            resp.read()
            count("requests")
            count("codes", str(resp.status))
            if stop_on_503 and resp.status == 503:
                stopping.set()
            if close or resp.getheader("Connection", "").lower() == "close":
                conn.close()
                conn = None
        except (BrokenPipeError, ConnectionResetError) as e:
            # A keep-alive connection the server closed before reading the
            # next request: not accepted, so not dropped; reconnect.
            if close:
                count("dropped")
            conn = None
        except (http.client.HTTPException, OSError):
            count("dropped")
            conn = None


ts = [threading.Thread(target=worker) for _ in range(int(threads))]
for t in ts:
    t.start()
for t in ts:
    t.join()
json.dump(result, open(out, "w"))
print(json.dumps(result))
