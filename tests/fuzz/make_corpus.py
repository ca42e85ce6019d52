#!/usr/bin/env python3
"""make_corpus.py: writes the fuzz harnesses' seed corpora (corpus/<name>/)
and dictionaries (dict/<name>.dict) from the repository's real files: the
shipped model.json files, conf/dlserve.conf, the first Fashion-MNIST test
images, and the request and record forms the unit tests use. Each input
is in its harness's format (the comment at the top of fuzz_<name>.c).
Run from anywhere; rerun after changing a format. Python 3 standard
library only."""
import gzip
import json
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FASHION = "/usr/share/datasets/fashion-mnist"
# A compact array of pixel-like integers, 64 bytes of it and more: a form
# json_scan.c reads a block at a time (as it does with ", " between them).
PIXELS = "[" + ",".join(str(i * 37 % 256 if i % 3 else 0) for i in range(120)) + "]"

TINY = json.loads(
    '{"name": "tiny", "input": {"name": "input", "shape": [2, 2],'
    ' "scaling": {"scale": 1, "mean": 0, "std": 1}},'
    ' "layers": [{"name": "flatten", "type": "flatten"},'
    ' {"name": "fc", "type": "dense", "units": 3}],'
    ' "loss": "softmax_cross_entropy",'
    ' "output": {"name": "probabilities", "labels": ["a", "b", "c"]}}')


def read(path):
    with open(os.path.join(ROOT, path), "rb") as f:
        return f.read()


def write_corpus(name, seeds):
    d = os.path.join(HERE, "corpus", name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for label, data in seeds:
        if isinstance(data, str):
            data = data.encode()
        with open(os.path.join(d, label), "wb") as f:
            f.write(data)


def write_dict(name, tokens):
    os.makedirs(os.path.join(HERE, "dict"), exist_ok=True)
    with open(os.path.join(HERE, "dict", name + ".dict"), "w") as f:
        f.write("# %s: tokens for libFuzzer's mutations (make_corpus.py)\n" % name)
        for i, t in enumerate(tokens):
            esc = "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else
                          "\\x%02x" % ord(c) for c in t)
            f.write('t%d="%s"\n' % (i, esc))


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


def safetensors(tensors, meta):
    """tensors: [(name, dtype, shape, bytes)], laid out in order."""
    header, off, buf = {}, 0, b""
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [off, off + len(data)]}
        off += len(data)
        buf += data
    if meta is not None:
        header["__metadata__"] = meta
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + buf


def framed(st):
    """A safetensors file as fz_safetensors reads '{' inputs: header, '\\n', data."""
    hlen = struct.unpack("<Q", st[:8])[0]
    return st[8:8 + hlen].rstrip(b" ") + b"\n" + st[8 + hlen:]


def idx(magic_dims, dims, data):
    return struct.pack(">BBBB", 0, 0, 8, magic_dims) + \
        b"".join(struct.pack(">I", d) for d in dims) + data


JSON_TOKENS = ['{', '}', '[', ']', ':', ',', '"', 'true', 'false', 'null', '-0',
               '1e308', '1e-400', '0.1', '\\u0000', '\\ud83d\\ude00', '\\"', '\\\\',
               '\\n', '\\u00e9', '\xc3\xa9', '\xf0\x9f\x98\x80', '123456789012345678901']
OIP_KEYS = ['"id"', '"model"', '"model_version"', '"inputs"', '"outputs"', '"name"',
            '"shape"', '"datatype"', '"data"', '"parameters"', '"binary_data"',
            '"binary_data_size"', '"binary_data_output"', '"FP32"', '"UINT8"',
            '"BYTES"', '"INT64"', '"input"', '"probabilities"', '"label"', '"class"',
            '"timeout"']
# ModelInferRequest's tags (field << 3 | wire type: 2 length-delimited, 0
# varint) and the words of its values.
GRPC_TOKENS = ['\x0a', '\x12', '\x1a', '\x22', '\x2a', '\x32', '\x3a', '\x42', '\x08',
               '\x10', '\x18', '\xff\xff\xff\xff\x0f', 'FP32', 'UINT8', 'INT32', 'INT64',
               'BYTES', 'FP16', 'input', 'probabilities', 'label', 'class', 'timeout',
               'priority', 'classification', 'binary_data', 'labels', 'sequence_id']


def oip_seeds():
    one = {"id": "1", "inputs": [{"name": "input", "shape": [1, 2, 2], "datatype": "FP32",
                                  "data": [[1, 2], [3, 4]]}]}
    two = {"id": "two", "inputs": [{"name": "input", "shape": [2, 4], "datatype": "FP32",
                                    "data": [0.5, -1, 2e-3, 4, 5, 6, 7, 8]}],
           "outputs": [{"name": "label"}, {"name": "class", "parameters": {"binary_data": True}},
                       {"name": "probabilities"}]}
    u8 = {"inputs": [{"name": "input", "shape": [4], "datatype": "UINT8",
                      "data": [0, 1, 254, 255]}], "parameters": {"binary_data_output": True}}
    bin_req = {"id": "b", "inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32",
                                      "parameters": {"binary_data_size": 16}}],
               "outputs": [{"name": "probabilities", "parameters": {"binary_data": True}},
                           {"name": "label", "parameters": {"binary_data": True}}]}
    bin_u8 = {"inputs": [{"name": "input", "shape": [2, 2, 2], "datatype": "UINT8",
                          "parameters": {"binary_data_size": 8}}]}
    js = lambda o: json.dumps(o, separators=(",", ":"))
    b1, b2 = js(bin_req).encode(), js(bin_u8).encode()
    return [("json_one", js(one)), ("json_two", json.dumps(two, indent=1)), ("json_u8", js(u8)),
            ("json_bad_name", js({"inputs": [{"name": "pixels", "shape": [1, 4],
                                             "datatype": "FP32", "data": [1, 2, 3, 4]}]})),
            ("binary_fp32", b"B%d\n" % len(b1) + b1 + f32(1, 2, 3, 4)),
            ("binary_u8", b"B%d\n" % len(b2) + b2 + bytes(range(8))),
            ("route_infer", "R/v2/models/tiny/versions/2/infer"),
            ("route_ready", "R/v2/models/fashion-mlp/ready"),
            ("route_health", "R/v2/health/live"),
            ("route_load", "R/v2/repository/models/tiny/load"),
            ("route_metrics", "R/metrics")]


def oip_text_seeds():
    """Text requests for fuzz_oip_text.c's model (BYTES "text", max_length 6)."""
    js = lambda o: json.dumps(o, separators=(",", ":"))
    text = lambda data, shape, **kw: {"inputs": [dict(name="text", datatype="BYTES",
                                                      shape=shape, data=data)], **kw}
    strings = [b"hi", b"", "ab\u00e9".encode(), b"abcdef"]
    raw = b"".join(struct.pack("<I", len(s)) + s for s in strings)
    head = js({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [4],
                           "parameters": {"binary_data_size": len(raw)}}],
               "parameters": {"binary_data_output": True}}).encode()
    short = js({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [2, 1],
                            "parameters": {"binary_data_size": 9}}]}).encode()
    return [("json_one", js(text(["hello"], [1]))),
            ("json_nested", js(text([["a"], ["abcdef"]], [2, 1], id="n"))),
            ("json_outputs", js(text(["ab", "xyz"], [2], outputs=[
                {"name": "tags", "parameters": {"labels": True}},
                {"name": "path", "parameters": {"binary_data": True}},
                {"name": "tags", "parameters": {"classification": 2}}]))),
            ("json_long", js(text(["abcdefg", ""], [2]))),
            ("binary", b"B%d\n" % len(head) + head + raw),
            ("binary_short", b"B%d\n" % len(short) + short + b"\x03\0\0\0abc\x09\0")]


def record_seeds():
    js = lambda o: json.dumps(o, separators=(",", ":"))
    req = {"id": "r1", "model": "tiny", "model_version": "3",
           "inputs": [{"name": "input", "shape": [1, 2, 2], "datatype": "FP32",
                       "data": [1, 2, 3, 4]}]}
    payload = js({"id": "p", "inputs": [{"name": "input", "shape": [2, 4], "datatype": "FP32",
                                         "parameters": {"binary_data_size": 32}}]}).encode()
    return [("inputs", "0 - - -\n" + js(req)),
            ("data", "0 - - -\n" + js({"id": 17, "data": [2, 4, 6, 8, 10, 12, 14, 16]})),
            ("data_model", "0 - tiny k1\n" + js({"model": "tiny", "model_version": 1,
                                                  "data": [0.25, 0.5, 0.75, 1]})),
            ("payload", b"0 %d tiny -\n" % len(payload) + payload + f32(*range(8))),
            ("raw_f32", b"1 - tiny raw\n" + f32(1, 2, 3, 4, 5, 6, 7, 8)),
            ("raw_nan", b"1 - - -\n" + f32(1, 2, 3, float("nan"))),
            ("no_headers", js({"data": [1, 2, 3, 4]})),
            ("data_pixels", '0 - - -\n{"id":"p","data":%s}' % PIXELS),
            ("bad_json", "0 - - hdr-id\n{\"id\": \"x\", \"data\": [1, 2,")]


def jsonl_seeds():
    """fuzz_jsonl: lines of tests/unit/test_jsonl.c's model (mode byte 0,
    4: inputs only), texts to tokenize (1, 5) and vocabularies (2, 6)."""
    line_a = {"text": "The cat, SAT", "ids": [1, 2], "feat": [[1, 3], [5, 7]],
              "x": [[1, 2], [3, 4]], "k": 4, "tags": ["O", "N", "V"], "path": ["q", "p"],
              "fd": [0, -1], "cls": "hi", "reg": [0.5, -1]}
    line_b = {"text": "don't caf\u00e9", "ids": [7], "feat": [1, 3, 5, 7, 0.5, 2e-3],
              "x": [1, 2, 3, 4], "k": [255], "tags": [0, 2], "path": [1], "fd": [1, 0, -1],
              "cls": 0, "reg": [[1e3], [-2]]}
    lines = (json.dumps(line_a) + "\n" + json.dumps(line_b) + "\r\n").encode()
    inputs = {k: v for k, v in line_a.items() if k in ("text", "ids", "feat", "x", "k")}
    write_corpus("jsonl", [
        ("two_lines", b"\x00" + lines),
        ("inputs_only", b"\x04" + (json.dumps(inputs) + "\n").encode()),
        ("text", b"\x01" + "In the beginning God created the heaven and the earth.\n"
                            "Don't, caf\u00e9!".encode()),
        ("text_lower", b"\x05" + b"THE Cat sat\x00on\tthe mat"),
        ("vocab", b"\x02" + b"the\ncat\nsat\ndon't\ncaf\xc3\xa9\n"),
        ("vocab_crlf", b"\x06" + b"a\r\nb\r\nc")])
    write_dict("jsonl", JSON_TOKENS + ['"text"', '"ids"', '"feat"', '"x"', '"k"', '"tags"',
                                       '"path"', '"fd"', '"cls"', '"reg"', '"lm"', '"O"',
                                       '"N"', '"V"', '"p"', '"q"', '"hi"', "[[", "]]", "-1",
                                       "\n", "\r\n", "the", "cat", "'", "\xc3\xa9"])


# ---- protobuf, by hand (the standard library has no protobuf) -------------

def pb_varint(n):
    n &= (1 << 64) - 1   # negative integers as their 64-bit two's complement
    out = b""
    while True:
        out += bytes([(n & 0x7F) | (0x80 if n >> 7 else 0)])
        n >>= 7
        if not n:
            return out


def pb_len(field, data):
    if isinstance(data, str):
        data = data.encode()
    return pb_varint(field << 3 | 2) + pb_varint(len(data)) + data


def pb_int(field, v):
    return pb_varint(field << 3) + pb_varint(v)


def pb_param(key, **v):
    """A map<string, InferParameter> entry: bool_param 1, int64_param 2,
    string_param 3."""
    (kind, value), = v.items()
    param = (pb_int(1, int(value)) if kind == "b" else pb_int(2, value) if kind == "i"
             else pb_len(3, value))
    return pb_len(1, key) + pb_len(2, param)


def pb_input(name, dtype, shape, contents=None, params=b""):
    """A ModelInferRequest.InferInputTensor; contents: InferTensorContents
    bytes (fp32 6, int 2, int64 3, uint 4, bytes 8)."""
    t = (pb_len(1, name) + pb_len(2, dtype) + pb_len(3, b"".join(pb_varint(d) for d in shape))
         + (pb_len(4, params) if params else b""))
    return t + (pb_len(5, contents) if contents is not None else b"")


def pb_request(inputs, outputs=(), raw=(), rid="", params=()):
    """A ModelInferRequest: model_name 1, id 3, parameters 4, inputs 5,
    outputs 6 (name, parameters), raw_input_contents 7."""
    m = pb_len(1, "tiny") + (pb_len(3, rid) if rid else b"")
    m += b"".join(pb_len(4, p) for p in params) + b"".join(pb_len(5, i) for i in inputs)
    for name, oparams in outputs:
        m += pb_len(6, pb_len(1, name) + b"".join(pb_len(2, p) for p in oparams))
    return m + b"".join(pb_len(7, r) for r in raw)


def grpc_seeds():
    """ModelInferRequests for fuzz_grpc.c's 2x2-input model, typed and raw."""
    packed = lambda field, vals: pb_len(field, b"".join(pb_varint(v) for v in vals))
    return [
        ("typed_fp32", pb_request([pb_input("input", "FP32", [1, 2, 2],
                                            pb_len(6, f32(1, 2, 3, 4)))], rid="1")),
        ("raw_fp32", pb_request([pb_input("input", "FP32", [2, 4])],
                                [("label", []), ("class", [pb_param("binary_data", b=True)]),
                                 ("probabilities", [pb_param("classification", i=2)])],
                                raw=[f32(0.5, -1, 2e-3, 4, 5, 6, 7, 8)], rid="two",
                                params=[pb_param("timeout", i=2500),
                                        pb_param("priority", i=1)])),
        ("typed_u8", pb_request([pb_input("input", "UINT8", [4],
                                          packed(4, [0, 1, 254, 255]))])),
        ("typed_int64", pb_request([pb_input("input", "INT64", [1, 4],
                                             packed(3, [1, -2, 3, 1 << 40]))])),
        ("typed_int32", pb_request([pb_input("input", "INT32", [4], packed(2, [-1, 0, 7, 9]))])),
        ("raw_u8", pb_request([pb_input("input", "UINT8", [2, 2, 2])], raw=[bytes(range(8))])),
        ("bytes", pb_request([pb_input("input", "BYTES", [2],
                                       pb_len(8, b"caf\xc3\xa9") + pb_len(8, ""))])),
        ("raw_bytes", pb_request([pb_input("input", "BYTES", [1])],
                                 raw=[struct.pack("<I", 3) + b"abc"])),
        ("two_inputs", pb_request([pb_input("input", "FP32", [1, 4], pb_len(6, f32(1, 2, 3, 4))),
                                   pb_input("extra", "FP32", [1], pb_len(6, f32(1)))])),
        ("wrong_field", pb_request([pb_input("input", "FP32", [4], packed(2, [1, 2, 3, 4]))])),
        ("sequence", pb_request([pb_input("input", "FP32", [4], pb_len(6, f32(1, 2, 3, 4)))],
                                params=[pb_param("sequence_id", s="s1")])),
    ]


def main():
    mlp = read("models/fashion-mlp/model.json")
    cnn = read("models/fashion-cnn/model.json")
    tiny = json.dumps(TINY).encode()

    write_corpus("json", [("model_mlp", mlp), ("model_cnn", cnn),
                          ("request", json.dumps(oip_seeds()[1][1] and json.loads(oip_seeds()[1][1]))),
                          ("numbers", "[0,-0,-0.0,1e308,1E-320,123456789012345678,"
                                      "1234567890123456789,0.1,3.4028235e38,-12.5e+3]"),
                          ("strings", '{"a":"\\ud83d\\ude00\\u00e9\\n\\"","b":["\xc3\xa9",""],'
                                      '"c":{"d":{}}}'),
                          ("nested", "[[[[[[{\"x\":[null,true,false]}]]]]]]"),
                          ("pixels", PIXELS),
                          ("pixels_spaced", PIXELS.replace(",", ", ")),
                          ("scalar", ' "text" ')])
    write_dict("json", JSON_TOKENS)
    write_corpus("oip", oip_seeds())
    write_dict("oip", JSON_TOKENS + OIP_KEYS + ["R/v2/models/", "/versions/", "/infer",
                                                "/ready", "/v2/repository/"])
    write_corpus("oip_text", oip_text_seeds())
    write_dict("oip_text", JSON_TOKENS + OIP_KEYS + ['"text"', '"tags"', '"path"', '"labels"',
                                                     '"classification"', '\x01\0\0\0',
                                                     '\xff\xff\xff\xff'])
    write_corpus("grpc", grpc_seeds())
    write_dict("grpc", GRPC_TOKENS)
    write_corpus("records", record_seeds())
    write_dict("records", JSON_TOKENS + OIP_KEYS)

    model_keys = ['"name"', '"input"', '"shape"', '"scaling"', '"scale"', '"mean"', '"std"',
                  '"layers"', '"type"', '"dense"', '"conv2d"', '"maxpool2d"', '"avgpool2d"',
                  '"batchnorm"', '"dropout"', '"flatten"', '"embedding"', '"relu"', '"tanh"',
                  '"sigmoid"', '"softmax"', '"units"', '"filters"', '"kernel"', '"stride"',
                  '"padding"', '"bias"', '"rate"', '"eps"', '"momentum"', '"num_embeddings"',
                  '"dim"', '"loss"', '"softmax_cross_entropy"', '"mse"', '"output"', '"labels"',
                  '"training"', '"epochs"', '"batch_size"', '"optimizer"', '"adam"', '"sgd"',
                  '"lr"', '"schedule"', '"cosine"', '"step"', '"seed"', '"datatype"']
    write_corpus("model_conf", [("fashion_mlp", mlp), ("fashion_cnn", cnn), ("tiny", tiny)])
    write_dict("model_conf", JSON_TOKENS + model_keys)

    weights = [("fc.weight", "F32", [3, 4], f32(*[i / 10 for i in range(12)])),
               ("fc.bias", "F32", [3], f32(0.1, -0.2, 0.3))]
    mlp_header = safetensors([("fc1.weight", "F32", [256, 784], b""),
                              ("fc1.bias", "F32", [256], b"")], {"format": "pt"})
    write_corpus("safetensors", [
        ("tiny_weights", safetensors(weights, {"format": "pt", "dlserve.model": tiny.decode()})),
        ("tiny_no_meta", safetensors(weights, None)),
        ("dtypes", safetensors([("a", "BF16", [2], b"\0\0\0\0"), ("b", "I64", [1, 1], bytes(8)),
                                ("c", "U8", [0], b""), ("d", "F16", [1], b"\0<")], {})),
        ("mlp_header_only", mlp_header),
        ("bn_extra", safetensors(weights + [("bn.num_batches_tracked", "I64", [], bytes(8))],
                                 {"format": "pt"})),
        ("framed_tiny", framed(safetensors(weights, {"format": "pt"}))),
        ("framed_dtypes", framed(safetensors([("a", "BF16", [2], b"\0\0\0\0"),
                                              ("b", "BOOL", [1], b"\1"),
                                              ("c", "F64", [1], bytes(8))], None)))])
    write_dict("safetensors", JSON_TOKENS + ['"dtype"', '"shape"', '"data_offsets"',
                                             '"__metadata__"', '"F32"', '"F16"', '"BF16"',
                                             '"F64"', '"I64"', '"I32"', '"I16"', '"I8"', '"U8"',
                                             '"BOOL"', '"fc.weight"', '"fc.bias"', '"format"',
                                             '"pt"'])

    pos = {"step": 12, "optim_steps": 12, "rng_counter": 3, "seed": 42, "batch_size": 64,
           "ranks": 1}
    ckpt = lambda p, meta: safetensors(
        [("params", "F32", [15], f32(*range(15))), ("state", "F32", [0], b""),
         ("optimizer", "F32", [30], f32(*range(30)))],
        {"dlserve.checkpoint": json.dumps(p, separators=(",", ":"))} if meta else {})
    write_corpus("checkpoint", [("step12", ckpt(pos, True)), ("no_position", ckpt(pos, False)),
                                ("framed_step12", framed(ckpt(pos, True))),
                                ("wrong_sizes", safetensors([("params", "F32", [2], f32(1, 2))],
                                                            {"dlserve.checkpoint": "{}"}))])
    write_dict("checkpoint", JSON_TOKENS + ['"params"', '"state"', '"optimizer"', '"F32"',
                                            '"dlserve.checkpoint"', '"step"', '"optim_steps"',
                                            '"rng_counter"', '"seed"', '"batch_size"',
                                            '"ranks"', '"dtype"', '"shape"', '"data_offsets"',
                                            '"__metadata__"'])

    # Two real test images and their labels; a 2x3x3 file, gzip'd and not.
    with gzip.open(os.path.join(FASHION, "t10k-images-idx3-ubyte.gz")) as f:
        pixels = f.read(16 + 2 * 784)[16:]
    with gzip.open(os.path.join(FASHION, "t10k-labels-idx1-ubyte.gz")) as f:
        labels = f.read(8 + 2)[8:]
    img, lab = idx(3, [2, 28, 28], pixels), idx(1, [2], labels)
    small = idx(3, [2, 3, 3], bytes(range(18)))
    pair = lambda i, l: b"\x01" + struct.pack("<H", len(i)) + i + l
    write_corpus("idx", [("fashion_pair", pair(img, lab)), ("fashion_images", b"\x00" + img),
                         ("small_pair", pair(small, idx(1, [2], b"\x03\x07"))),
                         ("small_gz", b"\x00" + gzip.compress(small, mtime=0)),
                         ("vectors", b"\x00" + idx(2, [3, 2], bytes(6))),
                         ("channels", b"\x00" + idx(4, [1, 2, 2, 2], bytes(8)))])

    row = lambda v: ",".join(str(x) for x in v)
    csv_rows = "\n".join(row([labels[i]] + list(pixels[i * 784 + 300:i * 784 + 304]))
                         for i in range(2))
    write_corpus("csv", [("fashion_label_dim4", b"\x0b" + ("label,a,b,c,d\n" + csv_rows +
                                                           "\n").encode()),
                         ("floats_dim3", b"\x02" + b"0.5,-1e-3, 2\r\n1,2,3.25\r\n\n"),
                         ("label_dim1", b"\x08" + b"9,0.1\n0,+7\n"),
                         ("dim8", b"\x07" + b"1,2,3,4,5,6,7,8")])
    write_dict("csv", [",", "\n", "\r\n", "e", "E-", ".", "-", "+", "inf", "nan", "0x1p3",
                       "2147483648", "label"])

    jsonl_seeds()

    conf = read("conf/dlserve.conf")
    write_corpus("ini", [("dlserve_conf", conf),
                         ("kafka", "[kafka]\nbrokers = localhost:9092\ndelivery = exactly-once\n"
                                   "[kafka.consumer]\nsession.timeout.ms = 10000\n"
                                   "[kafka.producer]\nlinger.ms = 5 ; comment\n"),
                         ("models", "\xef\xbb\xbf# models\n[models]\npolicy = versions:1,3\n"
                                    "device = cuda:1\n  threads = 2\n[http]\nmax_body_bytes = 8M\n"),
                         ("log", "[log]\nlevel = debug\ndebug = kafka,http\n"),
                         ("client", "[kafka]\ninput_topics = a:m1, b\ndefault_model = m2\n"
                                    "[kafka.client]\nsecurity.protocol = SASL_SSL\n"
                                    "sasl.password = ${env:HOME}\n[http]\n"
                                    "token = x${file:/etc/hostname}y\n")])
    ini_words = ["[http]", "[batching]", "[models]", "[log]", "[kafka]", "[redis]",
                 "[kafka.consumer]", "[kafka.producer]", " = ", " ;", "#", "\n", "true", "off",
                 "8M", "1k", "latest:2", "versions:", "cuda:", "exactly-once", "redis",
                 "[kafka.client]", "${env:", "${file:", "}", "sasl.password"]
    write_dict("ini", ini_words)
    write_corpus("set", [("overrides", "http.port=9000\nmodels.policy=versions:1,3\n"
                                       "kafka.consumer.session.timeout.ms=10000\n"
                                       "log.debug=kafka,http\nmodels.device=cuda:1"),
                         ("delivery", "kafka.delivery=redis\nredis.host=localhost"),
                         ("tls", "http.tls_cert=/c.pem\nhttp.tls_key=/k.pem\nhttp.token=s3cret"),
                         ("bad", "http.port=70000")])
    write_dict("set", ["http.", "batching.", "models.", "log.", "kafka.", "redis.",
                       "kafka.consumer.", "kafka.producer.", "=", "\n", "port", "policy",
                       "device", "delivery", "latest:", "versions:", "cuda:", "1G"])


if __name__ == "__main__":
    main()
