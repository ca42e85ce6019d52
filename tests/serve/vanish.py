#!/usr/bin/env python3
"""vanish.py PORT PATH BODY N THREADS: N POST requests to PATH, THREADS at
a time, each on a new connection that the client resets (SO_LINGER 0)
without reading the answer: at once, or after up to 2 ms, so that some
go while the daemon holds or queues them and some after it has answered.
Prints how many were sent; exit 1 if a connection was refused."""
import random
import socket
import struct
import sys
import threading
import time

port, path, body_file, n, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
body = open(body_file, "rb").read()
request = ("POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
           "Content-Length: %d\r\n\r\n" % (path, len(body))).encode() + body
left = n
sent = 0
refused = 0
lock = threading.Lock()


def worker(seed):
    global left, sent, refused
    rnd = random.Random(seed)
    while True:
        with lock:
            if left == 0:
                return
            left -= 1
        try:
            s = socket.create_connection(("127.0.0.1", int(port)), timeout=10)
        except OSError:
            with lock:
                refused += 1
            continue
        try:
            s.sendall(request)
            with lock:
                sent += 1
            wait = rnd.choice((0, 0, 0.0005, 0.001, 0.002))
            if wait:
                time.sleep(wait)
        except OSError:
            pass
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()   # a reset, not a FIN


ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print("sent %d, refused %d" % (sent, refused))
sys.exit(1 if refused else 0)
