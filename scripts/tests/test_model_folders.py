"""Model folders (issue 12): `ort-run`, `bench` and `inspect` take a folder and
find the model, the tokenizer and the configs. Layouts: an onnxruntime-genai
folder (genai_config.json names the decoder), and the transformers.js /
Optimum layout (DIR/onnx/model.onnx, model_q4.onnx, ...; tokenizer and
configs in DIR), where --variant picks; and a folder of our exporter's
model.onnx + model-cached.onnx, which defaults to the graph with the KV
cache. A folder that fits none is an error listing what it holds. The models
are the tiny genai builds (--genai), re-saved with their weights inside for
the onnx/ layout, and the tiny Qwen3 export (--tiny).

  pytest scripts/tests/test_model_folders.py --onebit build/1bit --genai build/models/genai-tiny \
      --tiny build/models/qwen3-tiny
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

PROMPT = "The capital of France is"


def run(onebit, *args, check=True):
    p = subprocess.run([onebit, *map(str, args)], capture_output=True, text=True)
    if check:
        assert p.returncode == 0, f"1bit {' '.join(map(str, args))} exited {p.returncode}:\n{p.stderr}"
    return p


def ids(onebit, model, *extra):
    out = run(onebit, "ort-run", model, "--prompt", PROMPT, "-n", 8, "--json", *extra).stdout
    return json.loads(out[out.index("{"):])["generated_ids"]


@pytest.fixture(scope="module")
def genai(pytestconfig) -> Path:
    return Path(pytestconfig.getoption("genai"))


@pytest.fixture(scope="module")
def tjs(genai, tmp_path_factory) -> Path:
    """A transformers.js-style folder: onnx/model.onnx (fp32) and onnx/model_q4.onnx (int4)."""
    import onnx

    d = tmp_path_factory.mktemp("tjs")
    (d / "onnx").mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(genai / "genai-fp32" / name, d / name)
    shutil.copy(genai / "checkpoint" / "config.json", d / "config.json")
    for build, name in (("fp32", "model.onnx"), ("int4", "model_q4.onnx")):
        onnx.save(onnx.load(str(genai / f"genai-{build}" / "model.onnx")), str(d / "onnx" / name))
    return d


def test_genai_folder(onebit, genai):
    d = genai / "genai-fp32"
    assert ids(onebit, d) == ids(onebit, d / "model.onnx")


def test_onnx_subfolder_default_is_fp32(onebit, genai, tjs):
    assert ids(onebit, tjs) == ids(onebit, genai / "genai-fp32" / "model.onnx")


def test_onnx_subfolder_variant(onebit, genai, tjs):
    assert ids(onebit, tjs, "--variant", "q4") == ids(onebit, genai / "genai-int4" / "model.onnx")


def test_unknown_variant_lists_them(onebit, tjs):
    p = run(onebit, "ort-run", tjs, "--variant", "int8", "--prompt", PROMPT, check=False)
    assert p.returncode == 1, p.stderr
    assert "no variant 'int8'" in p.stderr and "fp32, q4" in p.stderr, p.stderr


def test_several_models_without_model_onnx(onebit, tjs, tmp_path):
    d = tmp_path / "two"
    (d / "onnx").mkdir(parents=True)
    for v in ("fp16", "q4"):
        shutil.copy(tjs / "onnx" / "model_q4.onnx", d / "onnx" / f"model_{v}.onnx")
    p = run(onebit, "ort-run", d, "--prompt-ids", "1,2", check=False)
    assert p.returncode == 1 and "--variant fp16, q4" in p.stderr, p.stderr


def test_folder_of_no_known_layout(onebit, tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"\0")
    (tmp_path / "sub").mkdir()
    p = run(onebit, "ort-run", tmp_path, "--prompt-ids", "1", check=False)
    assert p.returncode == 1, p.stderr
    assert "no model found" in p.stderr and "weights.bin" in p.stderr and "sub/" in p.stderr, p.stderr


def test_inspect_and_bench_take_folders(onebit, tjs):
    p = run(onebit, "inspect", tjs, "--variant", "q4")
    assert "MatMulNBits" in p.stdout, p.stdout
    p = run(onebit, "bench", tjs, "--prompt-lengths", "4", "--gen", "2", "--no-bandwidth", "--threads", "1")
    assert "decode" in p.stdout, p.stdout


def test_exporter_pair_defaults_to_the_cached_graph(onebit, pytestconfig):
    """scripts/export_onnx.py writes model.onnx (no cache) and
    model-cached.onnx side by side: the folder runs the one with the KV
    cache, says which, and --variant fp32 still picks the other."""
    tiny = Path(pytestconfig.getoption("tiny"))
    p = run(onebit, "ort-run", tiny, "--cached", "--prompt", PROMPT, "-n", 4)
    assert f"(folder layout): {tiny / 'model-cached.onnx'}" in p.stderr, p.stderr
    assert "| KV cache |" in p.stderr, p.stderr
    assert ids(onebit, tiny) == ids(onebit, tiny / "model-cached.onnx")
    p = run(onebit, "ort-run", tiny, "--variant", "fp32", "--prompt", PROMPT, "-n", 4)
    assert f"(folder layout): {tiny / 'model.onnx'}" in p.stderr and "| no cache |" in p.stderr, p.stderr
    p = run(onebit, "bench", tiny, "--prompt-lengths", "4", "--gen", "2", "--no-bandwidth", "--threads", "1")
    assert f"(folder layout: {tiny / 'model-cached.onnx'})" in p.stdout, p.stdout
