"""HTTP edge cases against a running dlserve: early refusals read by clients
that send their whole body first, limits on URL, headers and connections.
usage: http_edges.py PORT CASE; prints what it saw, exit 0 when as expected."""
import http.client
import json
import socket
import sys
import time
import urllib.error
import urllib.request

PORT = int(sys.argv[1])
URL = "http://127.0.0.1:%d" % PORT
MAX_BODY = 1 << 20          # the test runs the daemon with http.max_body_bytes = 1 MiB


def urllib_post(path, n):
    """urllib sends the whole body before it reads: the status and error."""
    req = urllib.request.Request(URL + path, data=b"x" * n,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def expect(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond:
        sys.exit(1)


def error_of(body):
    return json.loads(body).get("error", "")


def raw(data, linger=False):
    """Sends data on a new socket and returns what comes back until close."""
    s = socket.create_connection(("127.0.0.1", PORT), timeout=30)
    try:
        s.sendall(data)
    except OSError:
        pass
    out = b""
    try:
        while True:
            c = s.recv(65536)
            if not c:
                break
            out += c
    except OSError as e:
        out += ("<%s>" % e).encode()
    s.close()
    return out


def case_urllib_413():
    code, body = urllib_post("/v2/models/fashion-mlp/infer", MAX_BODY + MAX_BODY // 2)
    expect(code == 413 and "max_body_bytes" in error_of(body),
           "urllib, 1.5 MiB body sent whole: %d %s" % (code, body[:120]))


def case_urllib_404():
    code, body = urllib_post("/no/such/path", 512 * 1024)
    expect(code == 404 and "no such path" in error_of(body),
           "urllib, 512 KiB body to an unknown path: %d %s" % (code, body[:120]))


def case_urllib_413_size():
    # sys.argv[3] bytes, far over the limit: still read to its end, then 413
    n = int(sys.argv[3])
    code, body = urllib_post("/v2/models/fashion-mlp/infer", n)
    expect(code == 413 and "max_body_bytes" in error_of(body),
           "urllib, %d byte body sent whole: %d %s" % (n, code, body[:120]))


def case_chunked_413():
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=30)
    chunks = (b"y" * 65536 for _ in range(40))          # 2.5 MiB, no Content-Length
    c.request("POST", "/v2/models/fashion-mlp/infer", body=chunks, encode_chunked=True)
    r = c.getresponse()
    body = r.read()
    expect(r.status == 413 and "max_body_bytes" in error_of(body),
           "chunked 2.5 MiB body: %d %s" % (r.status, body[:120]))


def case_keepalive_after_413():
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=30)
    c.request("POST", "/v2/models/fashion-mlp/infer", body=b"z" * (MAX_BODY + 1))
    r = c.getresponse()
    r.read()
    first = r.status
    c.request("GET", "/v2/health/live")
    r = c.getresponse()
    body = r.read()
    expect(first == 413 and r.status == 200 and b"live" in body,
           "the same connection serves after a drained 413: %d then %d" % (first, r.status))


def case_huge_declared():
    # past what a refusal discards (512 MiB): answered at once, before any body byte
    out = raw(b"POST /v2/models/fashion-mlp/infer HTTP/1.1\r\nHost: x\r\n"
              b"Content-Length: 1073741824\r\n\r\n")
    expect(out.startswith(b"HTTP/1.1 413"), "1 GiB declared, no body sent: %r" % out[:60])


def case_url_414():
    out = raw(b"GET /v2/health/live?" + b"a" * 10000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    expect(out.startswith(b"HTTP/1.1 414") and b'"error"' in out,
           "10 kB URL: %r" % out[:40])
    out = raw(b"GET /v2/health/live?" + b"a" * 40000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    expect(out.startswith(b"HTTP/1.1 414"), "40 kB URL: %r" % out[:40])


def case_header_431():
    out = raw(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 40000 +
              b"\r\n\r\n")
    expect(out.startswith(b"HTTP/1.1 431"), "40 kB header: %r" % out[:50])


def case_connections_503():
    limit = int(sys.argv[3])
    held = [socket.create_connection(("127.0.0.1", PORT)) for _ in range(limit)]
    # One more is refused once the daemon has accepted the held ones, which
    # a loaded machine may take a while to do: until then it is served, so
    # it is asked again (10 s at most). Without the limit it never is 503.
    for _ in range(100):
        c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=30)
        c.request("GET", "/v2/health/live")
        r = c.getresponse()
        body = r.read()
        if r.status == 503:
            break
        c.close()
        time.sleep(0.1)
    expect(r.status == 503 and "max_connections" in error_of(body) and
           (r.getheader("Connection") or "").lower() == "close" and
           r.getheader("Retry-After") == "1",
           "connection %d of %d: %d %s (Retry-After %s)" %
           (limit + 1, limit, r.status, body[:100], r.getheader("Retry-After")))
    c.close()
    for s in held:
        s.close()
    for _ in range(100):         # the server notices the closes
        c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=30)
        c.request("GET", "/v2/health/live")
        r = c.getresponse()
        r.read()
        c.close()
        if r.status == 200:
            break
        time.sleep(0.1)
    expect(r.status == 200, "served again once connections closed: %d" % r.status)


def case_connections_backlog():
    """Past the daemon's hard limit (max_connections + 64, the room for
    503 answers) a connection waits to be accepted: it is not closed, and
    is answered once others go."""
    limit = int(sys.argv[3]) + 64
    held = [socket.create_connection(("127.0.0.1", PORT)) for _ in range(limit)]
    time.sleep(0.5)   # (not a margin: an early answer fails whenever it comes)
    extra = socket.create_connection(("127.0.0.1", PORT))   # the kernel's backlog takes it
    extra.settimeout(1.0)
    extra.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
    try:
        got = extra.recv(100)
        expect(False, "connection %d of %d: %r before any other closed" % (limit + 1, limit, got[:60]))
    except socket.timeout:
        expect(True, "connection %d of %d waits" % (limit + 1, limit))
    for s in held:
        s.close()
    extra.settimeout(10.0)
    got = extra.recv(100)
    # 200, or 503 while the closes are still being counted: answered either way
    expect(got.startswith(b"HTTP/1.1 200") or got.startswith(b"HTTP/1.1 503"),
           "then answered: %r" % got[:60])
    extra.close()


globals()["case_" + sys.argv[2]]()
