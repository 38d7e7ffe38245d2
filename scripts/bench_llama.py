#!/usr/bin/env python3
"""llama.cpp (llama-cpp-python) on the same Qwen3 weights as an ONNX export,
under the protocol of `1bit bench` and scripts/bench_ort.py.

  gguf   ONNX initializers -> a float32 GGUF with llama.cpp's Qwen3 names
         (gguf.get_tensor_name_map; `*_T` [K,N] weights transposed back to
         [N,K]; the tied lm_head is token_embd) and the real Qwen3
         tokenizer, then llama_model_quantize to Q4_0 with `pure` set, so
         every matrix, the tied embedding/lm_head included, is Q4_0 (by
         default llama.cpp would make the output tensor Q6_K).
  check  the float32 GGUF's logits against onnxruntime on the ONNX file for
         the same ids (proves the conversion: same weights, same graph).
  bench  prefill (one llama_decode of the prompt) and decode (one
         llama_decode per token, greedy argmax over the logits, no sampler),
         prompt = the synthetic ids of models/bench.cpp; prints one JSON
         object like bench_ort.py. Q4_0 blocks: 32 weights, one float16
         scale (18 bytes), so 4.5 bits per weight.

         --ubatch N caps llama.cpp's physical batch (default: the whole
         prompt in one); --pythonpath DIR imports llama_cpp from another
         build (pip install --target DIR). On Xeons with AMX the pip build's
         AMX kernels crash on batches of several tokens (docs/BENCHMARK.md,
         "A Xeon with AMX"): --ubatch 1 keeps its decode measurable, its
         prompt then going one token at a time.

  bench_llama.py gguf --onnx build-models/qwen3-0.6b/model-cached.onnx --config ../shared/models/qwen3/config-0.6b.json \\
                      --tokenizer ../shared/models/qwen3/tokenizer.json --out build-models/qwen3-0.6b/qwen3-0.6b
  bench_llama.py bench build-models/qwen3-0.6b/qwen3-0.6b-q4_0.gguf --prompt-lengths 32,256,1024 --gen 64 --threads 2
"""
from __future__ import annotations

import argparse
import ctypes
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np

from bench_ort import synthetic_prompt


def onnx_weights(path: str) -> dict[str, np.ndarray]:
    """transformers parameter name -> array in transformers' layout."""
    import onnx
    from onnx import numpy_helper

    out = {}
    for t in onnx.load(path).graph.initializer:
        name = t.name
        if not name.startswith(("model.", "lm_head.")):
            continue  # exporter constants (val_*, clone*)
        a = numpy_helper.to_array(t)
        if name.endswith("_T"):  # stored [K, N] for MatMul; transformers keeps [N, K]
            name, a = name[:-2], a.T
        out[name] = np.ascontiguousarray(a.astype(np.float32))
    return out


def write_gguf(args):
    import gguf

    cfg = json.loads(Path(args.config).read_text())
    weights = onnx_weights(args.onnx)
    if "model.embed_tokens.weight" not in weights and "lm_head.weight" in weights:
        weights["model.embed_tokens.weight"] = weights.pop("lm_head.weight")  # tied: one table
    weights.pop("model.rotary_emb.inv_freq", None)
    f32 = Path(args.out + "-f32.gguf")
    w = gguf.GGUFWriter(str(f32), "qwen3")
    w.add_name("qwen3-0.6b-shape random-init (1bit benchmark)")
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(float(cfg["rope_theta"]))
    w.add_file_type(gguf.LlamaFileType.ALL_F32)

    tok = json.loads(Path(args.tokenizer).read_text())
    vocab = [""] * cfg["vocab_size"]
    types = [gguf.TokenType.UNUSED] * cfg["vocab_size"]
    for piece, i in tok["model"]["vocab"].items():
        vocab[i], types[i] = piece, gguf.TokenType.NORMAL
    for added in tok.get("added_tokens", []):
        vocab[added["id"]] = added["content"]
        types[added["id"]] = gguf.TokenType.CONTROL if added.get("special") else gguf.TokenType.USER_DEFINED
    for i, piece in enumerate(vocab):
        if not piece:
            vocab[i] = f"[PAD{i}]"
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(vocab)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(cfg["bos_token_id"])
    w.add_eos_token_id(cfg["eos_token_id"])
    w.add_pad_token_id(cfg["bos_token_id"])
    w.add_add_bos_token(False)

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN3, cfg["num_hidden_layers"])
    for hf, a in weights.items():
        name = names.get_name(hf, try_suffixes=(".weight", ".bias"))
        if name is None:
            sys.exit(f"no llama.cpp name for {hf}")
        w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=False)
    w.close()
    print(f"wrote {f32} ({f32.stat().st_size / 1e9:.2f} GB)", flush=True)

    import llama_cpp

    llama_cpp.llama_backend_init()
    q4 = Path(args.out + "-q4_0.gguf")
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0
    p.pure = True  # every matrix Q4_0, the tied output included
    p.nthread = args.threads
    if llama_cpp.llama_model_quantize(str(f32).encode(), str(q4).encode(), ctypes.byref(p)) != 0:
        sys.exit("llama_model_quantize failed")
    print(f"wrote {q4} ({q4.stat().st_size / 1e9:.3f} GB)", flush=True)


def load(path: str, threads: int, n_ctx: int, logits_all: bool = False, ubatch: int = 0):
    import llama_cpp

    return llama_cpp.Llama(model_path=path, n_threads=threads, n_threads_batch=threads, n_ctx=n_ctx,
                           n_batch=n_ctx, n_ubatch=ubatch or n_ctx, logits_all=logits_all, verbose=False)


def decode(llm, ids: list[int], pos: int, all_logits: bool = False) -> np.ndarray:
    """One llama_decode of `ids` at positions pos.. ; the last position's logits (or all)."""
    import llama_cpp

    n = len(ids)
    batch = llama_cpp.llama_batch_init(n, 0, 1)
    try:
        for i, t in enumerate(ids):
            batch.token[i] = t
            batch.pos[i] = pos + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = all_logits or i == n - 1
        batch.n_tokens = n
        if llama_cpp.llama_decode(llm.ctx, batch) != 0:
            sys.exit("llama_decode failed")
        vocab = llm.n_vocab()
        if all_logits:
            p = llama_cpp.llama_get_logits(llm.ctx)
            return np.ctypeslib.as_array(p, shape=(n, vocab)).copy()
        p = llama_cpp.llama_get_logits_ith(llm.ctx, n - 1)
        return np.ctypeslib.as_array(p, shape=(vocab,))
    finally:
        llama_cpp.llama_batch_free(batch)


def clear_cache(llm):
    import llama_cpp

    llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(llm.ctx), True)


def check(args):
    from onebit_tools.ort import session

    ids = synthetic_prompt(args.n, 151936)
    llm = load(args.gguf, 2, 512, logits_all=True)
    got = decode(llm, ids, 0, all_logits=True)
    sess = session(args.onnx)
    feed = {"input_ids": np.array([ids], dtype=np.int64)}
    names = [i.name for i in sess.get_inputs()]
    if "past" in names:
        shp = sess.get_inputs()[names.index("past")].shape
        feed["past"] = np.zeros((shp[0], 1, shp[2], 0, shp[4]), dtype=np.float32)
    ref = sess.run(["logits"], feed)[0][0]
    rel = float(np.abs(got - ref).max() / np.abs(ref).max())
    top1 = float(np.mean(got.argmax(-1) == ref.argmax(-1)))
    print(f"llama.cpp {args.gguf} vs onnxruntime {args.onnx}: {len(ids)} positions, max|d|/max|ref| {rel:.3e}, "
          f"top-1 agreement {top1 * 100:.1f}%")
    sys.exit(0 if top1 >= 0.9 else 1)


def bench(args):
    lengths = [int(s) for s in args.prompt_lengths.split(",")]
    n_ctx = max(lengths) + args.gen + 16
    t0 = time.perf_counter()
    llm = load(args.gguf, args.threads, n_ctx, ubatch=args.ubatch)
    load_s = time.perf_counter() - t0
    rows = []
    for p in lengths:
        clear_cache(llm)
        ids = synthetic_prompt(p, llm.n_vocab())
        prefill_ms, decode_ms = 0.0, 0.0
        pos = 0
        feed = ids
        for step in range(args.gen):
            t = time.perf_counter()
            logits = decode(llm, feed, pos)
            tok = int(np.argmax(logits))
            ms = (time.perf_counter() - t) * 1000
            pos += len(feed)
            feed = [tok]
            if step == 0:
                prefill_ms = ms
            else:
                decode_ms += ms
        rows.append({"prompt": p, "gen": args.gen, "prefill_ms": prefill_ms,
                     "decode_ms_per_token": decode_ms / max(1, args.gen - 1)})
        print(f"llama.cpp prompt {p}: prefill {p / (prefill_ms / 1000):.1f} tok/s, decode "
              f"{decode_ms / max(1, args.gen - 1):.2f} ms/token", file=sys.stderr, flush=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"model": args.gguf, "threads": args.threads, "load_s": load_s, "rows": rows,
                      "peak_rss_mib": peak, "weight_bytes": Path(args.gguf).stat().st_size}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gguf")
    g.add_argument("--onnx", required=True)
    g.add_argument("--config", required=True)
    g.add_argument("--tokenizer", required=True)
    g.add_argument("--out", required=True, help="path prefix: OUT-f32.gguf and OUT-q4_0.gguf")
    g.add_argument("--threads", type=int, default=2)
    c = sub.add_parser("check")
    c.add_argument("gguf")
    c.add_argument("--onnx", required=True)
    c.add_argument("-n", type=int, default=24)
    b = sub.add_parser("bench")
    b.add_argument("gguf")
    b.add_argument("--prompt-lengths", default="32,256,1024")
    b.add_argument("--gen", type=int, default=64)
    b.add_argument("--threads", type=int, default=2)
    b.add_argument("--ubatch", type=int, default=0, help="llama.cpp's physical batch (default: the whole prompt)")
    ap.add_argument("--pythonpath", help="import llama_cpp from this directory (another build)")
    args = ap.parse_args()
    if args.pythonpath:
        sys.path.insert(0, str(Path(args.pythonpath).resolve()))
    {"gguf": write_gguf, "check": check, "bench": bench}[args.cmd](args)


if __name__ == "__main__":
    main()
