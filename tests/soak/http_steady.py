#!/usr/bin/env python3
"""http_steady.py URL BODY RATE OUT: POSTs BODY to URL at RATE requests a
second (open loop on one keep-alive connection, reconnecting when it
closes) until the file OUT.stop exists. Writes to OUT a JSON summary:
"requests", answers by status code ("codes"), the distinct 503 error
messages ("503"), and "errors": requests that got no HTTP answer
(connection refused, reset or timed out) with the first few reasons."""
import http.client
import json
import os
import sys
import time
from urllib.parse import urlparse

url, body_file, rate, out = sys.argv[1:5]
u = urlparse(url)
body = open(body_file, "rb").read()
period = 1.0 / float(rate)
res = {"requests": 0, "codes": {}, "503": [], "errors": 0, "error_reasons": []}
conn = None
due = time.monotonic()
while not os.path.exists(out + ".stop"):
    now = time.monotonic()
    if now < due:
        time.sleep(due - now)
    due += period
    res["requests"] += 1
    try:
        if conn is None:
            conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        conn.request("POST", u.path, body, {"Content-Type": "application/json"})
        r = conn.getresponse()
        data = r.read()
        res["codes"][str(r.status)] = res["codes"].get(str(r.status), 0) + 1
        if r.status == 503:
            try:
                msg = json.loads(data).get("error", "")
            except ValueError:
                msg = data[:100].decode("latin-1")
            if msg not in res["503"]:
                res["503"].append(msg)
        if (r.getheader("Connection") or "").lower() == "close":
            conn.close()
            conn = None
    except (http.client.HTTPException, OSError) as e:
        res["errors"] += 1
        if len(res["error_reasons"]) < 5:
            res["error_reasons"].append(repr(e))
        conn = None
json.dump(res, open(out, "w"))
