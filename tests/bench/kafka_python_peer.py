#!/usr/bin/python3
"""kafka_python_peer.py: the Kafka inference service a user would write
without dlserve, in Python with confluent-kafka and PyTorch, for
tests/bench/kafka_vs_python.

    kafka_python_peer.py --brokers B --input IN --output OUT --group G \\
        --model-dir REPO/fashion-mlp --threads T --count N \\
        [--batch 64] [--timeout 0.1] [--linger-ms 5] [-X key=value ...]

It consumes raw float32 records (content-type application/octet-stream,
the form `kafka_tool feed --format binary` writes), takes them
consume(batch, timeout) at a time, applies model.json's input scaling,
runs the batch through the same network (tests/py/torch_model.py) with
the model folder's latest safetensors weights on T torch threads, and
produces one record per input: the input's key, a JSON value
{"id", "class", "scores"} (id: header dlserve-id, else the key; scores:
the softmax). At-least-once, as dlserve's default: a batch's offsets are
stored (and auto-committed) once all its outputs were acknowledged.
-X sets consumer properties (librdkafka's names).

Prints "assigned" on stdout when the group first assigns it partitions,
then, once N outputs were acknowledged (producer flushed), one JSON line
{"records", "seconds", "rate"}: seconds from the first record consumed to
the last output acknowledged. Then it waits for SIGTERM (so that its CPU
time can be read from /proc), which ends it. Exit 1 on a failed delivery
or a bad record.
"""

import argparse
import collections
import json
import os
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--brokers", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--model-dir", required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--timeout", type=float, default=0.1)
    p.add_argument("--linger-ms", type=int, default=5)
    p.add_argument("-X", action="append", default=[], metavar="KEY=VALUE")
    return p.parse_args()


def load_model(model_dir, threads):
    """(model in eval mode, (scale, mean, std)) from model.json and the
    latest version's model.safetensors."""
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(threads))
    import torch
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "py"))
    import torch_model
    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    with open(os.path.join(model_dir, "model.json")) as f:
        spec = json.load(f)
    versions = [int(d) for d in os.listdir(model_dir) if d.isdigit()
                and os.path.exists(os.path.join(model_dir, d, "model.safetensors"))]
    if not versions:
        raise SystemExit("kafka_python_peer: no <version>/model.safetensors in " + model_dir)
    path = os.path.join(model_dir, str(max(versions)), "model.safetensors")
    model = torch_model.build_model(spec)
    model.load_state_dict(torch_model.read_safetensors(path)[0])
    model.eval()
    sc = spec["input"].get("scaling", {})
    return model, (float(sc.get("scale", 1.0)), float(sc.get("mean", 0.0)),
                   float(sc.get("std", 1.0))), list(spec["input"]["shape"])


class Batch:
    """One consumed batch: its outputs not yet acknowledged and the offsets
    to store once none is left."""

    def __init__(self, msgs):
        self.pending = len(msgs)
        self.failed = None
        last = {}
        for m in msgs:
            last[(m.topic(), m.partition())] = m.offset()
        self.offsets = last

    def ack(self, err, _msg):
        self.pending -= 1
        if err is not None and self.failed is None:
            self.failed = err


def main():
    args = parse_args()
    from confluent_kafka import Consumer, Producer, TopicPartition
    import torch
    model, (scale, mean, std), shape = load_model(args.model_dir, args.threads)
    conf = {"bootstrap.servers": args.brokers, "group.id": args.group,
            "auto.offset.reset": "earliest", "enable.auto.offset.store": False}
    for kv in args.X:
        k, v = kv.split("=", 1)
        conf[k] = v
    consumer = Consumer(conf)
    producer = Producer({"bootstrap.servers": args.brokers, "linger.ms": args.linger_ms})
    assigned = []

    def on_assign(c, parts):
        if not assigned:
            assigned.append(True)
            print("assigned", flush=True)

    consumer.subscribe([args.input], on_assign=on_assign)
    inflight = collections.deque()
    done, t_first = 0, None
    while done < args.count:
        msgs = consumer.consume(args.batch, args.timeout)
        producer.poll(0)
        retire(consumer, inflight, TopicPartition)
        if not msgs:
            continue
        if t_first is None:
            t_first = time.monotonic()
        for m in msgs:
            if m.error():
                raise SystemExit("kafka_python_peer: consume: %s" % m.error())
        x = torch.frombuffer(bytearray(b"".join(m.value() for m in msgs)), dtype=torch.float32)
        x = x.reshape([len(msgs)] + shape)
        with torch.inference_mode():
            p = torch.softmax(model((x * scale - mean) / std), dim=1)
        classes = p.argmax(dim=1).tolist()
        batch = Batch(msgs)
        for m, c, s in zip(msgs, classes, p.tolist()):
            hdr = dict(m.headers() or ())
            rid = (hdr.get("dlserve-id") or m.key() or b"").decode()
            value = json.dumps({"id": rid, "class": c, "scores": s})
            produce(producer, args.output, m.key(), value, batch.ack)
        inflight.append(batch)
        done += len(msgs)
    producer.flush()
    retire(consumer, inflight, TopicPartition)
    secs = time.monotonic() - t_first
    print(json.dumps({"records": done, "seconds": round(secs, 3),
                      "rate": round(done / max(secs, 1e-6))}), flush=True)
    while True:     # until SIGTERM (its default action)
        time.sleep(60)


def produce(producer, topic, key, value, on_delivery):
    """Produces one output, serving delivery reports while the queue is full."""
    while True:
        try:
            producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
            return
        except BufferError:
            producer.poll(0.01)


def retire(consumer, inflight, TopicPartition):
    """Stores the offsets of the leading batches whose outputs were all
    acknowledged (auto-commit then commits them); exits on a failed one."""
    while inflight and inflight[0].pending == 0:
        b = inflight.popleft()
        if b.failed is not None:
            raise SystemExit("kafka_python_peer: delivery failed: %s" % b.failed)
        consumer.store_offsets(offsets=[TopicPartition(t, p, o + 1)
                                        for (t, p), o in b.offsets.items()])


if __name__ == "__main__":
    main()
