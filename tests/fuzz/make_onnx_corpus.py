#!/usr/bin/python3
"""make_onnx_corpus.py: the seed corpus of fuzz_onnx (corpus/onnx/): the
small PyTorch models of tests/py/onnx_models.py exported to ONNX (a
transformer encoder among them; the text models over a dynamic time
axis: masks, LSTM, GRU), and a truncated copy of one. Run with /usr/bin/python3 (torch); rerun after
changing those models."""
import os
import shutil
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "py"))
import onnx_models  # noqa: E402

out = os.path.join(here, "corpus", "onnx")
os.makedirs(out, exist_ok=True)
with tempfile.TemporaryDirectory() as tmp:
    onnx_models.export(tmp)
    for name in ("mlp", "cnn_bn", "resnet", "emb2", "ops", "unsupported"):
        shutil.copy(f"{tmp}/{name}.onnx", f"{out}/{name}.onnx")
    onnx_models.transformer(tmp)
    shutil.copy(f"{tmp}/tx_relu.onnx", f"{out}/transformer.onnx")
    onnx_models.sequence(tmp)
    for name in ("seq_tx", "seq_lstm", "seq_gru", "seq_cnn", "seq_lm"):
        shutil.copy(f"{tmp}/{name}.onnx", f"{out}/{name}.onnx")
    data = open(f"{tmp}/mlp.onnx", "rb").read()
    open(f"{out}/mlp_cut.onnx", "wb").write(data[:len(data) // 2])
