#!/usr/bin/env python3
"""many_conns.py URL BODY PID CONNS SECOND OUT: holds CONNS keep-alive
connections to the daemon at once (standard library only: non-blocking
sockets and selectors, one thread).

1. Opens CONNS connections and keeps every one open to the end.
2. Sends one POST of BODY (an infer request) on each, all before reading
   any answer, and reads every answer.
3. Sends a second POST on every SECOND-th connection (keep-alive: the same
   socket, no reconnection) and reads those answers.
4. With all CONNS still open and idle: GET /status on one more connection
   until its requests_in_flight is 0 (a request counts until the daemon
   has finished sending its answer, which can be just after the client
   has read it).

While the connections are open it samples the daemon's thread count
(/proc/PID/status, Threads:) and, once all are open, its open sockets
(/proc/PID/fd). Writes a JSON summary to OUT: answers by status code,
answers that do not look like a prediction, connections the daemon
closed, the most threads seen, the daemon's sockets, and /status's
last requests_in_flight. The checks themselves are left to the caller."""
import json
import os
import selectors
import socket
import sys
import time
from urllib.parse import urlparse

url, body_file, pid, conns, second, out = sys.argv[1:7]
conns, second = int(conns), int(second)
u = urlparse(url)
body = open(body_file, "rb").read()
request = (("POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
            "Content-Length: %d\r\n\r\n") % (u.path, u.hostname, u.port, len(body))).encode() + body
# A guard against a hang only: nothing here is timed.
GUARD_S = 300

result = {"codes": {}, "bad_bodies": 0, "closed": 0, "max_threads": 0, "daemon_sockets": 0,
          "answers": 0, "in_flight": None}


def sample_threads():
    with open("/proc/%s/status" % pid) as f:
        for line in f:
            if line.startswith("Threads:"):
                result["max_threads"] = max(result["max_threads"], int(line.split()[1]))


def daemon_sockets():
    n = 0
    for fd in os.listdir("/proc/%s/fd" % pid):
        try:
            if os.readlink("/proc/%s/fd/%s" % (pid, fd)).startswith("socket:"):
                n += 1
        except OSError:
            pass
    return n


class Conn:
    def __init__(self):
        self.sock = socket.create_connection((u.hostname, u.port), timeout=GUARD_S)
        self.sock.setblocking(False)
        self.out = b""
        self.inbuf = b""
        self.want = 0          # answers still expected
        self.answers = []      # (status, body)

    def parse(self):
        """Takes complete answers off inbuf."""
        while True:
            end = self.inbuf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.inbuf[:end].decode("latin-1").split("\r\n")
            length = 0
            for h in head[1:]:
                k, _, v = h.partition(":")
                if k.strip().lower() == "content-length":
                    length = int(v)
            if len(self.inbuf) < end + 4 + length:
                return
            self.answers.append((int(head[0].split()[1]), self.inbuf[end + 4:end + 4 + length]))
            self.inbuf = self.inbuf[end + 4 + length:]
            self.want -= 1


def exchange(batch):
    """Sends each connection's pending bytes and reads until each has its
    answers, sampling the daemon's threads on the way."""
    sel = selectors.DefaultSelector()
    for c in batch:
        sel.register(c.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, c)
    left = sum(1 for c in batch if c.want > 0)
    while left > 0:
        events = sel.select(GUARD_S)
        if not events:
            raise SystemExit("many_conns: no progress in %d s" % GUARD_S)
        sample_threads()
        for key, mask in events:
            c = key.data
            if mask & selectors.EVENT_WRITE and c.out:
                c.out = c.out[c.sock.send(c.out):]
                if not c.out:
                    sel.modify(c.sock, selectors.EVENT_READ, c)
            if mask & selectors.EVENT_READ:
                data = c.sock.recv(65536)
                if not data:   # closed by the daemon: its answers never come
                    result["closed"] += 1
                    sel.unregister(c.sock)
                    left -= 1
                    continue
                c.inbuf += data
                before = c.want
                c.parse()
                if before > 0 and c.want == 0:
                    sel.unregister(c.sock)
                    left -= 1
    sel.close()


def plausible(status, data):
    """A prediction for one image: 10 probabilities that sum to 1."""
    if status != 200:
        return True   # counted by code
    try:
        d = json.loads(data)
        probs = d["outputs"][0]["data"]
        return d["outputs"][0]["shape"] == [1, 10] and abs(sum(probs) - 1) < 1e-3
    except (ValueError, KeyError, IndexError, TypeError):
        return False


sample_threads()
cs = [Conn() for _ in range(conns)]
sample_threads()
for c in cs:
    c.out, c.want = request, 1
exchange(cs)
result["daemon_sockets"] = daemon_sockets()   # every connection still open
sampled = cs[::second]
for c in sampled:
    c.out, c.want = request, 1
exchange(sampled)
sample_threads()


def in_flight():
    """/status's requests_in_flight, on one more connection."""
    s = socket.create_connection((u.hostname, u.port), timeout=GUARD_S)
    s.sendall(("GET /status HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n\r\n"
               % (u.hostname, u.port)).encode())
    raw = b""
    while True:
        data = s.recv(65536)
        if not data:
            break
        raw += data
    s.close()
    return json.loads(raw[raw.find(b"\r\n\r\n") + 4:])["http"]["requests_in_flight"]


# Every answer is read: the count comes back to 0 while the connections
# stay open (polled; a guard of GUARD_S against a count that never does).
polls = 0
while polls < GUARD_S * 10:
    result["in_flight"] = in_flight()
    polls += 1
    if result["in_flight"] == 0:
        break
    time.sleep(0.1)

for c in cs:
    for st, data in c.answers:
        result["answers"] += 1
        result["codes"][str(st)] = result["codes"].get(str(st), 0) + 1
        if not plausible(st, data):
            result["bad_bodies"] += 1
    c.sock.close()
json.dump(result, open(out, "w"))
print(json.dumps(result))
