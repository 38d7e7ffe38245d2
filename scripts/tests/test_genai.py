"""onnxruntime-genai's builds run unchanged (issue 12): the tiny model built
by onnxruntime-genai's model builder (scripts/genai_models.py: fp32, int4,
fp16) decoded by `1bit ort-run` against onnxruntime-genai's own greedy
generator on the same files, token by token, and against onnxruntime on the
same graph step by step (teacher-forced: onnxruntime follows 1bit's tokens,
so every step compares logits on one sequence). onnxruntime-genai 0.18's
generator cannot run its own fp16 CPU build (onnxruntime's buffer reuse
fails on the second step, onebit_tools/ort.py), so the fp16 tokens are
checked against onnxruntime's greedy run with that reuse off. int8 is `-p
int8` (8-bit MatMulNBits everywhere), int4-mixed the k_quant_mixed recipe
(4-bit with zero points, 8-bit LM head, promoted layers and embedding),
int4-acc1 the int4 build with accuracy_level 1 (float activations),
fp16-cuda the float16 build for CUDA (float16 GroupQueryAttention; its
tokens checked against onnxruntime's greedy run as fp16's). One test per
build and check:

  test_generator_tokens[fp32-0]   test_logits_vs_onnxruntime[int4]   test_kv_state[fp32]   test_plan_grows[fp16]

  pytest scripts/tests/test_genai.py --onebit build/1bit --genai build/models/genai-tiny
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

import parity

PROMPTS = ["Hello, world! The answer is", "The capital of France is", "def fibonacci(n):"]
STEPS = 32
# Mean KL(onnxruntime || 1bit) per build, nats: float32 agrees to rounding;
# int4 runs MatMulNBits with int8 activations on both sides, rounded apart.
# int8 and int4-mixed (8-bit MatMulNBits, run as two 4-bit halves) likewise.
# int4-acc1 (accuracy_level 1) computes in float on both sides: as fp32.
# fp16-cuda (the builder's CUDA build: float16 GroupQueryAttention) as fp16.
MAX_KL = {"fp32": 1e-6, "int4": 1e-3, "fp16": 1e-4, "int8": 1e-3, "int4-mixed": 1e-3, "int4-acc1": 1e-6,
          "fp16-cuda": 1e-4}
# Where the two generators may part: at a step whose two candidates lie
# within this many logits of each other in 1bit's own logits (a near tie
# that onnxruntime's int8 activation rounding and 1bit's decide apart;
# MatMulNBits accuracy_level 4 quantizes activations per block, as 1bit's
# int8-block does, but the scales round differently; fp16: every op's
# output rounds to float16, where the sums' orders differ by an ulp or two).
# fp32 and int4-acc1 (float activations) must not part.
TIE = {"fp32": 0.0, "int4": 0.1, "fp16": 0.05, "int8": 0.1, "int4-mixed": 0.1, "int4-acc1": 0.0, "fp16-cuda": 0.05}
BUILDS = ["fp32", "int4", "fp16", "int8", "int4-mixed", "int4-acc1", "fp16-cuda"]


def genai_dir(config, build: str) -> Path:
    return Path(config.getoption("genai")) / f"genai-{build}"


def onebit_generate(onebit: str, model: Path, prompt: str, extra: list[str] = ()) -> dict:
    cmd = [onebit, "ort-run", str(model), "--prompt", prompt, "-n", str(STEPS), "--json", *extra]
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode == 0, f"{' '.join(cmd)} exited {p.returncode}:\n{p.stderr}"
    return json.loads(p.stdout[p.stdout.index("{"):])


def genai_generate(model_dir: Path, prompt: str, steps: int = STEPS):
    """onnxruntime-genai's greedy search: the prompt ids, the new tokens and
    each step's logits ([steps, vocab], its generator's own)."""
    import onnxruntime_genai as og

    model = og.Model(str(model_dir))
    ids = [int(t) for t in og.Tokenizer(model).encode(prompt)]
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=len(ids) + steps)
    g = og.Generator(model, params)
    g.append_tokens(ids)
    out, logits = [], []
    while not g.is_done():
        g.generate_next_token()
        out.append(int(g.get_next_tokens()[0]))
        step = np.asarray(g.get_output("logits"), dtype=np.float32)
        logits.append(step.reshape(-1, step.shape[-1])[-1])
    return ids, out, np.stack(logits)


@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("prompt", range(len(PROMPTS)))
def test_generator_tokens(onebit, pytestconfig, tmp_path, build, prompt):
    d = genai_dir(pytestconfig, build)
    logits, got, prompt_ids = parity.run_onebit(onebit, str(d / "model.onnx"), ["--prompt", PROMPTS[prompt]], STEPS, [],
                                                str(tmp_path / "onebit.npy"))
    ours = [int(t) for t in got]
    if build.startswith("fp16"):  # and the CUDA build, which onnxruntime-genai's CPU package cannot run
        import onnxruntime_genai as og

        config = og.Config(str(d))
        config.clear_providers()  # the CUDA build's tokenizer, on the CPU package
        ids = [int(t) for t in og.Tokenizer(og.Model(config)).encode(PROMPTS[prompt])]
        theirs = [int(t) for t in parity.ort_greedy(str(d / "model.onnx"), np.array(ids), STEPS,
                                                     parity.eos_ids(str(d / "model.onnx")))[1]]
    else:
        ids, theirs, _ = genai_generate(d, PROMPTS[prompt])
    print(f"prompt ids {ids}\n1bit:              {ours}\nreference ({build}): {theirs}")
    assert [int(t) for t in prompt_ids] == ids, "the tokenizers disagree on the prompt"
    part = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)
    if part is None:
        assert len(ours) == len(theirs), f"1bit made {len(ours)} steps, onnxruntime-genai {len(theirs)}"
        print(f"every one of the {len(ours)} tokens agrees")
        return
    margin = float(logits[part][ours[part]] - logits[part][theirs[part]])
    print(f"they part at step {part}: 1bit's logits give its token {ours[part]} {logits[part][ours[part]]:.4f}, "
          f"the reference's {theirs[part]} {logits[part][theirs[part]]:.4f} (margin {margin:.4f}, tie bound "
          f"{TIE[build]})")
    assert margin <= TIE[build], f"the generators part at step {part} where 1bit's margin is {margin:.4f}: no near tie"


@pytest.mark.parametrize("build", BUILDS)
def test_logits_vs_onnxruntime(onebit, pytestconfig, tmp_path, build):
    model = genai_dir(pytestconfig, build) / "model.onnx"
    got, got_ids, prompt = parity.run_onebit(onebit, str(model), ["--prompt", PROMPTS[0]], STEPS, [],
                                             str(tmp_path / "onebit.npy"))
    ref, ref_ids = parity.ort_greedy(str(model), prompt, STEPS, parity.eos_ids(str(model)), follow=got_ids)
    s = parity.compare(ref, ref_ids, got, got_ids)
    print(parity.report(f"{build}_vs_onnxruntime", s))
    # A top-1 miss only where the two leading logits are a near tie (TIE).
    for step, margin in parity.top1_misses(got, ref, s["steps"]):
        print(f"step {step}: top-1 differs, 1bit's margin {margin:.4f}")
        assert margin <= TIE[build], f"top-1 differs at step {step} with a margin of {margin:.4f}: no near tie"
    assert s["mean_kl"] <= MAX_KL[build], f"mean KL {s['mean_kl']:.3e} > {MAX_KL[build]:g}"


@pytest.mark.parametrize("build", BUILDS)
def test_kv_state(onebit, pytestconfig, build):
    """The session keeps the cache (GroupQueryAttention appends in place); the
    plain graph (ONEBIT_KV_STATE=0: present fed back as past) picks the same tokens."""
    import os

    model = genai_dir(pytestconfig, build) / "model.onnx"
    kept = onebit_generate(onebit, model, PROMPTS[1])
    assert kept["kv_state"] is True
    env = dict(os.environ, ONEBIT_KV_STATE="0")
    cmd = [onebit, "ort-run", str(model), "--prompt", PROMPTS[1], "-n", str(STEPS), "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    plain = json.loads(p.stdout[p.stdout.index("{"):])
    assert plain["kv_state"] is False
    assert plain["generated_ids"] == kept["generated_ids"]


@pytest.mark.parametrize("build", BUILDS)
def test_plan_grows(onebit, pytestconfig, tmp_path, build):
    """With the KV state kept, GroupQueryAttention and the mask's ReduceSum
    follow growth: every steady step grows its plan as the step before,
    reshaping nothing (after the first step's patch and the second's, which
    records the growth), with the logits of patches that reshape, bit for bit.
    The fp16 CPU build writes its attention as plain ops (the mask built by
    Expand, Tile, Where, ... on float16), which 1bit fuses: its mask nodes are
    reshaped again at each grown step and checked (Plan::Growth), the rest
    not."""
    import re

    from onebit_tools import cli

    model = genai_dir(pytestconfig, build) / "model.onnx"
    runs = {}
    for regrow in ("1", "0"):
        runs[regrow] = cli.ort_run(onebit, model, ["--prompt", PROMPTS[0]], STEPS, tmp_path / f"{regrow}.npy",
                                   env={"ONEBIT_PROFILE": "1", "ONEBIT_PLAN_REGROW": regrow}, capture_stderr=True)
    grown = {k: re.search(r"; (\d+) grown as the step before", r.stderr) for k, r in runs.items()}
    assert grown["1"] and grown["0"], "no patch line in the profile"
    assert int(grown["1"].group(1)) == STEPS - 3
    assert int(grown["0"].group(1)) == 0
    assert runs["1"].logits.tobytes() == runs["0"].logits.tobytes()


def test_genai_config_ends_the_run(onebit, pytestconfig, tmp_path):
    """A genai folder's genai_config.json is what ends a run (the builder
    writes no config.json or generation_config.json beside it): its
    model.eos_token_id (an int or a list) stops at that token, its
    context_length stops the run when the sequence fills it."""
    import shutil

    src = genai_dir(pytestconfig, "fp32")
    assert not (src / "config.json").exists() and not (src / "generation_config.json").exists()
    r = onebit_generate(onebit, src / "model.onnx", PROMPTS[0])
    free, prompt_len = r["generated_ids"], len(r["prompt_ids"])
    assert len(free) == STEPS and r["stop_reason"] == "max_tokens"

    def folder_with(edit) -> Path:
        d = tmp_path / f"folder{len(list(tmp_path.iterdir()))}"
        shutil.copytree(src, d)
        cfg = json.loads((d / "genai_config.json").read_text())
        edit(cfg["model"])
        (d / "genai_config.json").write_text(json.dumps(cfg))
        return d

    def run_with(edit) -> dict:
        return onebit_generate(onebit, folder_with(edit), PROMPTS[0])

    eos = free[3]
    r = run_with(lambda m: m.update(eos_token_id=[7, eos]))
    assert r["stop_reason"] == "eos" and r["generated_ids"] == free[:free.index(eos) + 1]
    r = run_with(lambda m: m.update(eos_token_id=eos))
    assert r["stop_reason"] == "eos" and r["generated_ids"] == free[:free.index(eos) + 1]
    # -n past the context is refused up front, naming where the context came from.
    short = folder_with(lambda m: m.update(context_length=prompt_len + 5))
    p = subprocess.run([onebit, "ort-run", str(short), "--prompt", PROMPTS[0], "-n", str(STEPS)],
                       capture_output=True, text=True)
    assert p.returncode != 0
    assert f"context is {prompt_len + 5} (context_length in genai_config.json); use -n 5 or less" in p.stderr, p.stderr


def test_fp16_repeat_proven(onebit, pytestconfig):
    """The fp16 CPU build computes each layer's KV-head repeat targets from
    the cache's Shape; the fusion proves them the repeat for every length
    (graph/passes/shape_expr.h), so no step evaluates them: every layer's
    attention is fused with its repeat proven."""
    import os

    d = genai_dir(pytestconfig, "fp16")
    layers = json.loads((d / "genai_config.json").read_text())["model"]["decoder"]["num_hidden_layers"]
    env = dict(os.environ, ONEBIT_QDQ_DEBUG="1")
    p = subprocess.run([onebit, "ort-run", str(d / "model.onnx"), "--prompt", PROMPTS[0], "-n", "2"],
                       capture_output=True, text=True, env=env, check=True)
    assert f"mha_repeat_kv_fused groups={layers} repeat_proven={layers} " in p.stderr, p.stderr


def test_fp16_cache_is_lossless(onebit, pytestconfig, tmp_path):
    """On the fp16 build the keys and values are float16 already, so a
    float16 cache stores them exactly: the logits are bit for bit those of
    the float32 cache. The session keeps the model's own float16 by default
    (--kv-dtype auto); the fp32 build's default stays float32."""
    model = genai_dir(pytestconfig, "fp16") / "model.onnx"
    f32, ids32, _ = parity.run_onebit(onebit, str(model), ["--prompt", PROMPTS[2]], STEPS, ["--kv-dtype", "f32"],
                                      str(tmp_path / "f32.npy"))
    f16, ids16, _ = parity.run_onebit(onebit, str(model), ["--prompt", PROMPTS[2]], STEPS, ["--kv-dtype", "f16"],
                                      str(tmp_path / "f16.npy"))
    auto, ids_auto, _ = parity.run_onebit(onebit, str(model), ["--prompt", PROMPTS[2]], STEPS, [],
                                          str(tmp_path / "auto.npy"))
    assert list(ids16) == list(ids32) == list(ids_auto)
    assert np.array_equal(f16.view(np.uint32), f32.view(np.uint32))
    assert np.array_equal(auto.view(np.uint32), f32.view(np.uint32))
    assert onebit_generate(onebit, model, PROMPTS[2])["kv_dtype"] == "float16"
    assert onebit_generate(onebit, model, PROMPTS[2], ["--kv-dtype", "f32"])["kv_dtype"] == "float32"
    assert onebit_generate(onebit, genai_dir(pytestconfig, "fp32") / "model.onnx", PROMPTS[2])["kv_dtype"] == "float32"
