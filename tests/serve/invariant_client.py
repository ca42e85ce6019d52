#!/usr/bin/env python3
"""invariant_client.py: asks a daemon for the answers to Fashion-MNIST test
images in different groupings, for tests/serve/test_batch_invariant.sh.
Each mode writes the answers in image order to OUT, so that two groupings
compare with cmp. Standard library only.

  http URL MODEL MODE COUNT OUT
      OIP binary requests (the images as UINT8, one request a group) asking
      for "probabilities" as binary data; OUT holds the float32 bytes as
      the daemon sent them, COUNT x 10 values. MODE:
        one        one image a request, one request at a time
        clients:N  one image a request, from N threads at once, each on its
                   own keep-alive connection, so that the batcher can mix
                   them (the threads start together, at a barrier)
        group:N    N images a request, one request at a time
  kafka BOOTSTRAP IN OUT_TOPIC MODEL COUNT ONE_OUT BURST_OUT
      OIP JSON records (one UINT8 image each) through kcat: first one at
      a time, each sent once the answer to the one before is on OUT_TOPIC
      (keys MODEL/one-I), then all COUNT at once, in one kcat (keys
      MODEL/burst-I). ONE_OUT and BURST_OUT hold each answer's "scores"
      (the daemon's output_format "dlserve") as the daemon wrote them, a
      line an image: JSON numbers, each float32's shortest round trip, so
      that equal text is equal bits.

Exit 1, with the reason on stderr, when an answer is missing or not 200."""
import gzip
import http.client
import json
import queue
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

DATA = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"
PIXELS = 784
CLASSES = 10


def images(count):
    raw = gzip.open(DATA).read()[16:]
    return [raw[i * PIXELS:(i + 1) * PIXELS] for i in range(count)]


def request(imgs):
    """(body, json length) of an OIP binary request for these images."""
    head = json.dumps({
        "inputs": [{"name": "input", "datatype": "UINT8", "shape": [len(imgs), PIXELS],
                    "parameters": {"binary_data_size": PIXELS * len(imgs)}}],
        "outputs": [{"name": "probabilities", "parameters": {"binary_data": True}}],
    }).encode()
    return head + b"".join(imgs), len(head)


class Client:
    """One keep-alive connection to the daemon."""

    def __init__(self, url, model):
        u = urlsplit(url)
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
        self.path = "/v2/models/%s/infer" % model

    def infer(self, imgs):
        """The float32 bytes of the answer's probabilities."""
        body, n = request(imgs)
        self.conn.request("POST", self.path, body, {
            "Inference-Header-Content-Length": str(n),
            "Content-Type": "application/octet-stream"})
        r = self.conn.getresponse()
        raw = r.read()
        if r.status != 200:
            raise RuntimeError("HTTP %d: %r" % (r.status, raw[:300]))
        n = int(r.getheader("Inference-Header-Content-Length"))
        out = json.loads(raw[:n])["outputs"]
        assert [o["name"] for o in out] == ["probabilities"], out
        size = out[0]["parameters"]["binary_data_size"]
        assert out[0]["shape"] == [len(imgs), CLASSES] and size == 4 * CLASSES * len(imgs), out
        assert len(raw) == n + size, (len(raw), n, size)
        return raw[n:]


def http_mode(url, model, mode, count, path):
    imgs = images(count)
    if mode == "one" or mode.startswith("group:"):
        per = 1 if mode == "one" else int(mode.split(":")[1])
        c = Client(url, model)
        answers = [c.infer(imgs[i:i + per]) for i in range(0, count, per)]
    elif mode.startswith("clients:"):
        n = int(mode.split(":")[1])
        local = threading.local()
        start = threading.Barrier(n)

        def one(i):
            if not hasattr(local, "c"):
                local.c = Client(url, model)
                start.wait(60)
            return local.c.infer(imgs[i:i + 1])

        with ThreadPoolExecutor(n) as pool:
            # the first n images go one to each thread, so that each
            # connects before the barrier releases them all
            first = [pool.submit(one, i) for i in range(n)]
            answers = [f.result() for f in first] + list(pool.map(one, range(n, count)))
    else:
        sys.exit("invariant_client.py: unknown mode %r" % mode)
    with open(path, "wb") as f:
        f.write(b"".join(answers))


SCORES = re.compile(rb'"scores":(\[[^\]]*\])')


def kafka_mode(boot, topic_in, topic_out, model, count, one_path, burst_path):
    imgs = images(count)
    # librdkafka's default fetch.wait.max.ms (500) is how long the mock
    # holds an empty fetch: each answer would wait for it
    consumer = subprocess.Popen(
        ["kcat", "-q", "-u", "-b", boot, "-C", "-t", topic_out, "-o", "beginning",
         "-X", "fetch.wait.max.ms=5", "-f", "%k\t%s\n"], stdout=subprocess.PIPE)
    lines = queue.Queue()

    def read():
        for line in consumer.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    got = {}

    def wait_for(keys, seconds):
        end = time.monotonic() + seconds
        while not keys <= got.keys():
            try:
                line = lines.get(timeout=max(0.0, end - time.monotonic()))
            except queue.Empty:
                line = None
            if line is None:
                sys.exit("invariant_client.py: %d answers missing on '%s', e.g. %s"
                         % (len(keys - got.keys()), topic_out, sorted(keys - got.keys())[:3]))
            key, _, value = line.partition(b"\t")
            m = SCORES.search(value)
            if not m:
                sys.exit("invariant_client.py: no scores in %r" % line[:300])
            got[key.decode()] = m.group(1).decode()

    def record(key, img):
        rec = {"id": key, "model": model,
               "inputs": [{"name": "input", "datatype": "UINT8", "shape": [1, PIXELS],
                           "data": list(img)}]}
        return "%s|%s\n" % (key, json.dumps(rec))

    def send(text):
        # one kcat for each send: kcat -P on a pipe that stays open
        # produces nothing until the pipe ends
        subprocess.run(["kcat", "-q", "-b", boot, "-P", "-t", topic_in, "-K", "|"],
                       input=text.encode(), check=True, timeout=60)

    try:
        for i, img in enumerate(imgs):
            send(record("%s/one-%d" % (model, i), img))
            wait_for({"%s/one-%d" % (model, i)}, 60)
        send("".join(record("%s/burst-%d" % (model, i), img) for i, img in enumerate(imgs)))
        wait_for({"%s/burst-%d" % (model, i) for i in range(count)}, 120)
    finally:
        consumer.terminate()
        consumer.wait()
    for path, prefix in ((one_path, "one"), (burst_path, "burst")):
        with open(path, "w") as f:
            f.writelines(got["%s/%s-%d" % (model, prefix, i)] + "\n" for i in range(count))


if __name__ == "__main__":
    a = sys.argv[1:]
    try:
        if a[:1] == ["http"] and len(a) == 6:
            http_mode(a[1], a[2], a[3], int(a[4]), a[5])
        elif a[:1] == ["kafka"] and len(a) == 8:
            kafka_mode(a[1], a[2], a[3], a[4], int(a[5]), a[6], a[7])
        else:
            sys.exit(__doc__)
    except (OSError, RuntimeError, AssertionError, threading.BrokenBarrierError,
            subprocess.SubprocessError) as e:
        sys.exit("invariant_client.py: %s: %r" % (" ".join(a[:4]), e))
