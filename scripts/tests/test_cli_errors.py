"""Bad input to `1bit ort-run`, `1bit run`, `1bit inspect` and `1bit
tokenize`: each case must exit 1 (not a crash, not "internal error") with one
clear message naming what is wrong. One test per case:

  test_bad_input[missing tokenizer]
  test_tokenize_stdin_bound    more than 64 MiB on tokenize's standard input

  pytest scripts/tests/test_cli_errors.py --onebit build/1bit --tiny DIR   # DIR: model.onnx, tokenizer.json
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from conftest import tiny


@pytest.fixture(scope="module")
def files(pytestconfig, tmp_path_factory) -> dict[str, Path]:
    """The bad inputs, made once: name -> path."""
    model = tiny(pytestconfig) / "model.onnx"
    if not model.is_file():
        pytest.fail(f"{model} not found (the tiny export: scripts/test_models.py tiny --out DIR)")
    tmp = tmp_path_factory.mktemp("cli_errors")
    f = {"tiny": model, "tmp": tmp}
    # A model directory without a tokenizer.
    (tmp / "bare").mkdir()
    f["bare"] = Path(shutil.copy(model, tmp / "bare"))
    f["bad_tokenizer"] = tmp / "bad_tokenizer.json"
    f["bad_tokenizer"].write_text('{"model": {"type": "BPE", "vocab": 3}}')
    # A context of 8 positions (config.json beside a copy of the model).
    (tmp / "short").mkdir()
    f["short"] = Path(shutil.copy(model, tmp / "short"))
    (tmp / "short" / "config.json").write_text('{"max_position_embeddings": 8, "eos_token_id": 151645}')
    # A graph without logits.
    g = helper.make_graph([helper.make_node("Identity", ["input_ids"], ["out"])], "nologits",
                          [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "s"])],
                          [helper.make_tensor_value_info("out", TensorProto.INT64, ["b", "s"])])
    f["nologits"] = tmp / "nologits.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]), f["nologits"])
    # onnxruntime-genai's exclude_embeds and exclude_lm_head decoders: embeddings in, hidden states out.
    g = helper.make_graph([helper.make_node("Identity", ["inputs_embeds"], ["logits"])], "embeds",
                          [helper.make_tensor_value_info("inputs_embeds", TensorProto.FLOAT, ["b", "s", 8])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["b", "s", 8])])
    f["embeds"] = tmp / "embeds.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]), f["embeds"])
    g = helper.make_graph([helper.make_node("Cast", ["input_ids"], ["hidden_states"], to=TensorProto.FLOAT)], "nohead",
                          [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "s"])],
                          [helper.make_tensor_value_info("hidden_states", TensorProto.FLOAT, ["b", "s"])])
    f["nohead"] = tmp / "nohead.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]), f["nohead"])
    # A directory without a model, and a tokenizer with more ids than the model's logits.
    (tmp / "empty").mkdir()
    tok = json.loads((model.parent / "tokenizer.json").read_text())
    tok["model"]["vocab"]["zzbig"] = 200000
    f["big_tokenizer"] = tmp / "big_tokenizer.json"
    f["big_tokenizer"].write_text(json.dumps(tok))
    f["tiny_dir"] = model.parent
    f["blank_prompt"] = tmp / "blank.txt"
    f["blank_prompt"].write_text("\n")
    f["junk"] = tmp / "junk.npy"
    f["junk"].write_bytes(b"not numpy")
    f["ids"] = tmp / "ids.npy"
    np.save(f["ids"], np.array([[1, 2, 3]], dtype=np.int64))
    f["f32"] = tmp / "f32.npy"
    np.save(f["f32"], np.zeros((1, 3), dtype=np.float32))
    return f


# name -> (arguments with {file} placeholders, strings the message must contain)
CASES = {
    "missing tokenizer": (["ort-run", "{bare}", "--prompt", "hi"], ["no tokenizer.json", "--tokenizer"]),
    "unreadable tokenizer": (["ort-run", "{tiny}", "--prompt", "hi", "--tokenizer", "{tmp}/nope.json"], ["nope.json"]),
    "malformed tokenizer": (["ort-run", "{tiny}", "--prompt", "hi", "--tokenizer", "{bad_tokenizer}"],
                            ["bad_tokenizer.json"]),
    "prompt longer than the context": (["ort-run", "{short}", "--prompt-ids", "1,2,3,4,5,6,7,8,9,10"],
                                       ["prompt is 10 tokens", "context is 8"]),
    "missing prompt file": (["ort-run", "{tiny}", "--prompt-file", "{tmp}/nope.txt"],
                            ["--prompt-file", "nope.txt", "cannot open"]),
    "prompt file that is a directory": (["ort-run", "{tiny}", "-f", "{tmp}"], ["--prompt-file", "cannot read"]),
    "prompt file with only a newline": (["ort-run", "{tiny}", "-f", "{blank_prompt}"], ["blank.txt", "no prompt"]),
    "two prompts": (["ort-run", "{tiny}", "--prompt", "hi", "-f", "{blank_prompt}"],
                    ["exactly one of --prompt, --prompt-file and --prompt-ids"]),
    "no prompt": (["ort-run", "{tiny}"], ["exactly one of"]),
    "-n 0": (["ort-run", "{tiny}", "--prompt", "hi", "-n", "0"], ["at least 1"]),
    "--cached on a graph without a cache": (["ort-run", "{tiny}", "--cached", "--prompt", "hi"], ["no KV cache input"]),
    "--kv-dtype f16 on a graph without a cache": (["ort-run", "{tiny}", "--kv-dtype", "f16", "--prompt", "hi"],
                                                  ["float16 KV cache", "keeps no KV cache", "no past inputs"]),
    "graph without logits": (["ort-run", "{nologits}", "--prompt-ids", "1,2"],
                             ["no output named logits", "inputs:", "input_ids"]),
    "a decoder fed embeddings": (["ort-run", "{embeds}", "--prompt-ids", "1,2"],
                                 ["no input named input_ids", "inputs_embeds", "exclude_embeds"]),
    "a decoder without its LM head": (["ort-run", "{nohead}", "--prompt-ids", "1,2"],
                                      ["no output named logits", "hidden_states", "exclude_lm_head"]),
    "missing model": (["ort-run", "{tmp}/none.onnx", "--prompt-ids", "1"], ["none.onnx", "cannot open"]),
    "missing model, the directory's models listed": (["ort-run", "{tmp}/none.onnx", "--prompt-ids", "1"],
                                                     ["none.onnx", "no such file", "nologits.onnx"]),
    "missing model directory": (["ort-run", "{tmp}/nodir/model.onnx", "--prompt", "hi"],
                                ["nodir/model.onnx", "no directory", "nodir"]),
    "a directory without a model": (["ort-run", "{tmp}/empty", "--prompt", "hi"],
                                    ["empty", "no model found", "holds nothing"]),
    "a directory without the variant asked for": (["ort-run", "{tiny_dir}", "--variant", "q4", "--prompt", "hi"],
                                                  ["no variant 'q4'", "model.onnx", "model-cached.onnx"]),
    "tokenizer larger than the vocabulary": (["ort-run", "{tiny}", "--prompt", "hi", "--tokenizer", "{big_tokenizer}"],
                                             ["big_tokenizer.json", "200001 ids", "logits have 151936"]),
    "-n past the context": (["ort-run", "{short}", "--prompt-ids", "1,2,3", "-n", "10"],
                            ["-n 10", "need 13 positions", "context is 8", "-n 5 or less"]),
    "--top-p out of range": (["ort-run", "{tiny}", "--prompt", "hi", "--top-p", "1.5"], ["--top-p 1.5", "(0, 1]"]),
    "empty stop string": (["ort-run", "{tiny}", "--prompt", "hi", "--stop", ""], ["empty stop string"]),
    "chat without a tokenizer": (["chat", "{bare}"], ["no tokenizer.json"]),
    "chat on a directory without a model": (["chat", "{tmp}/empty"], ["no model found"]),
    "run: bad .npy": (["run", "{tiny}", "--input", "input_ids={junk}"], ["junk.npy", "not a .npy"]),
    "run: unknown input": (["run", "{tiny}", "--input", "tokens={ids}"], ["no input 'tokens'", "input_ids"]),
    "run: wrong dtype": (["run", "{tiny}", "--input", "input_ids={f32}"], ["'input_ids' is float32", "int64"]),
    "inspect: not a model": (["inspect", "{junk}"], ["junk.npy"]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input(name, onebit, files):
    args, expect = CASES[name]
    args = [a.format(**files) for a in args]
    p = subprocess.run([onebit] + args, capture_output=True, text=True, timeout=300)
    msg = (p.stderr or "").strip()
    print(f"exit {p.returncode}: {msg.splitlines()[-1] if msg else '(no message)'}")
    assert p.returncode == 1, f"exit {p.returncode}, want 1:\n{msg}"
    missing = [e for e in expect if e not in msg]
    assert not missing, f"{missing} not in the message:\n{msg}"
    assert "internal error" not in msg, msg


def test_tokenize_stdin_bound(onebit, files):
    """tokenize reads standard input as --prompt-file reads a file: up to 64
    MiB (cli/commands.h kMaxTextInputBytes); one byte more is refused, naming
    standard input and the bound, before the tokenizer loads."""
    tokenizer = str(files["tiny"].parent / "tokenizer.json")
    bound = 64 << 20
    ok = subprocess.run([onebit, "tokenize", "--tokenizer", tokenizer], input=b"Hello world",
                        capture_output=True, timeout=300)
    assert ok.returncode == 0, ok.stderr.decode()
    assert json.loads(ok.stdout) and all(isinstance(i, int) for i in json.loads(ok.stdout))
    over = subprocess.run([onebit, "tokenize", "--tokenizer", tokenizer], input=b"a" * (bound + 1),
                          capture_output=True, timeout=300)
    msg = over.stderr.decode().strip()
    assert over.returncode == 1, f"exit {over.returncode}, want 1:\n{msg}"
    assert "standard input" in msg and f"more than {bound} bytes" in msg, msg
