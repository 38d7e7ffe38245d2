"""`1bit chat` and `1bit ort-run` through the binary on the tiny Qwen3 export:

  test_chat_pipe_three_turns   three turns piped into `1bit chat --json`: turns 2
                               and 3 prefill only their own tokens (plus the last
                               answer's final token when it was not an end of
                               sequence), and each answer is what `ort-run
                               --prompt-ids` chooses on the conversation so far
  test_chat_pipe_text          the same without --json: the answers, one per line
  test_stop_string             --stop over two tokens: stops there, not printed
  test_greedy_is_default       no sampling flag and --top-k 1 choose the same ids
  test_seed                    the same --seed twice: the same ids; --json fields
  test_prompt_file             --prompt-file FILE and -f - (stdin): the prompt of
                               --prompt with the same text, one trailing newline
                               dropped, inner ones kept

  pytest scripts/tests/test_chat_cli.py --onebit build/1bit --tiny DIR
"""
from __future__ import annotations

import json
import subprocess

import pytest

from conftest import tiny


@pytest.fixture(scope="module")
def model(pytestconfig):
    m = tiny(pytestconfig) / "model-cached.onnx"
    if not m.is_file():
        pytest.fail(f"{m} not found (the tiny export: scripts/test_models.py tiny --out DIR)")
    return str(m)


def run(onebit, args, stdin=None):
    p = subprocess.run([onebit] + args, input=stdin, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"exit {p.returncode}:\n{p.stderr}"
    return p


def ort_run_json(onebit, model, args):
    return json.loads(run(onebit, ["ort-run", model, "--json"] + args).stdout)


TURNS = "Hello, who are you?\nWhat is two plus two?\nThank you!\n"


def test_chat_pipe_three_turns(onebit, model):
    p = run(onebit, ["chat", model, "--json", "-n", "8"], stdin=TURNS)
    records = [json.loads(line) for line in p.stdout.splitlines()]
    assert [r["turn"] for r in records] == [1, 2, 3]
    conversation = []
    for i, r in enumerate(records):
        if i > 0 and records[i - 1]["stop_reason"] == "eos":
            conversation.pop()  # the template's <|im_end|> replaces the answer's end of sequence
        pending = 0 if i == 0 or records[i - 1]["stop_reason"] == "eos" else 1
        assert r["past"] == len(conversation) - pending, r
        assert r["prefill_tokens"] == len(r["prompt_ids"]) + pending, r
        conversation += r["prompt_ids"]
        if i > 0:
            assert r["prefill_tokens"] < len(conversation)
        fresh = ort_run_json(onebit, model, ["--prompt-ids", ",".join(map(str, conversation)), "-n", "8"])
        assert fresh["generated_ids"] == r["generated_ids"], f"turn {i + 1}"
        conversation += r["generated_ids"]
    assert "KV cache kept across turns" in p.stderr


def test_chat_pipe_text(onebit, model):
    p = run(onebit, ["chat", model, "-n", "6", "--quiet"], stdin=TURNS)
    records = [json.loads(line) for line in run(onebit, ["chat", model, "-n", "6", "--json"], stdin=TURNS).stdout.splitlines()]
    assert p.stdout == "".join(r["text"] + "\n" for r in records)


def test_stop_string(onebit, model):
    free = ort_run_json(onebit, model, ["--prompt", "The capital of France is", "-n", "16"])
    # The stop string: the end of the text after some token k and the start after token k+1,
    # found from runs with -n k and -n k+1 (both greedy, so prefixes of the free run).
    for k in range(2, 15):
        left = ort_run_json(onebit, model, ["--prompt", "The capital of France is", "-n", str(k)])["text"]
        both = ort_run_json(onebit, model, ["--prompt", "The capital of France is", "-n", str(k + 1)])["text"]
        right = both[len(left):]
        if len(left) >= 2 and len(right) >= 2 and both.startswith(left):
            break
    else:
        pytest.fail(f"no two neighbouring tokens with text: {free['text']!r}")
    stop = left[-1] + right[0]
    r = ort_run_json(onebit, model, ["--prompt", "The capital of France is", "-n", "16", "--stop", stop])
    assert r["stop_reason"] == "stop_string" and r["stop_string"] == stop
    assert r["text"] == both[:both.find(stop)]
    printed = run(onebit, ["ort-run", model, "--prompt", "The capital of France is", "-n", "16", "--stop", stop, "-q"]).stdout
    assert printed == r["text"] + "\n"


def test_greedy_is_default(onebit, model):
    greedy = ort_run_json(onebit, model, ["--prompt", "Once upon a time", "-n", "12"])
    k1 = ort_run_json(onebit, model, ["--prompt", "Once upon a time", "-n", "12", "--top-k", "1", "--seed", "5"])
    assert greedy["sampling"] is None
    assert k1["sampling"]["top_k"] == 1
    assert greedy["generated_ids"] == k1["generated_ids"]


def test_seed(onebit, model):
    args = ["--prompt", "Once upon a time", "-n", "16", "--temperature", "0.9", "--top-p", "0.95", "--seed", "7"]
    a, b = ort_run_json(onebit, model, args), ort_run_json(onebit, model, args + ["--threads", "1"])
    assert a["generated_ids"] == b["generated_ids"]
    assert a["sampling"]["seed"] == 7
    for key in ("prompt_ids", "generated_ids", "text", "stop_reason", "timings", "peak_rss_mib"):
        assert key in a
    for key in ("load_s", "prefill_ms", "decode_ms_per_token", "choose_ms_per_token"):
        assert key in a["timings"]


def test_prompt_file(onebit, model, tmp_path):
    text = "Hello, who are you?\nWhat is two plus two?"
    want = ort_run_json(onebit, model, ["--prompt", text, "-n", "4"])
    for name, body in [("lf", text + "\n"), ("crlf", text + "\r\n"), ("none", text)]:
        f = tmp_path / f"{name}.txt"
        f.write_bytes(body.encode())
        got = ort_run_json(onebit, model, ["--prompt-file", str(f), "-n", "4"])
        assert got["prompt_ids"] == want["prompt_ids"], name
        assert got["generated_ids"] == want["generated_ids"], name
    piped = json.loads(run(onebit, ["ort-run", model, "--json", "-f", "-", "-n", "4"], stdin=text + "\n").stdout)
    assert piped["prompt_ids"] == want["prompt_ids"]
    # Only one newline goes: a second is the prompt's own.
    f = tmp_path / "two.txt"
    f.write_bytes((text + "\n\n").encode())
    two = ort_run_json(onebit, model, ["--prompt-file", str(f), "-n", "4"])
    assert two["prompt_ids"] == ort_run_json(onebit, model, ["--prompt", text + "\n", "-n", "4"])["prompt_ids"]
    assert two["prompt_ids"] != want["prompt_ids"]
