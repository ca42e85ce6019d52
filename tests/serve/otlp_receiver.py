#!/usr/bin/env python3
"""otlp_receiver.py PORTFILE OUTFILE: a minimal OpenTelemetry collector for
the tests: an HTTP server on a free port (written to PORTFILE) that takes
OTLP/HTTP JSON (POST /v1/traces, Content-Type application/json) and appends
each export request's spans to OUTFILE, one JSON object a line: {"resource":
{attributes as a dict}, "scope", "span": the span with its attributes as a
dict}. Anything else gets 404 or 400. Runs until killed."""
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def attrs(lst):
    out = {}
    for a in lst or []:
        (kind, v), = a["value"].items()
        out[a["key"]] = int(v) if kind == "intValue" else v
    return out


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path != "/v1/traces":
            return self.answer(404)
        if self.headers.get("Content-Type") != "application/json":
            return self.answer(415)
        try:
            req = json.loads(body)
            lines = []
            for rs in req["resourceSpans"]:
                res = attrs(rs["resource"]["attributes"])
                for ss in rs["scopeSpans"]:
                    for sp in ss["spans"]:
                        sp = dict(sp, attributes=attrs(sp.get("attributes")))
                        lines.append(json.dumps({"resource": res, "scope": ss["scope"],
                                                 "span": sp}))
        except (KeyError, ValueError, TypeError, AttributeError):
            return self.answer(400)
        with open(sys.argv[2], "a") as f:
            f.write("".join(line + "\n" for line in lines))
        self.answer(200)

    def answer(self, code):
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
srv.serve_forever()
