"""Running the 1bit binary: `1bit run` on .npy inputs, `1bit ort-run` with
--dump-logits, `1bit inspect --json` and `1bit pack`.

A failed command raises OneBitError with the command line, the exit code and
1bit's stderr, unless the caller asks for the result with check=False (to
test the failure itself).
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from onebit_tools import REPO


def default_onebit() -> str:
    """$ONEBIT_CLI, else build/1bit of this checkout."""
    return os.environ.get("ONEBIT_CLI") or str(REPO / "build" / "1bit")


class OneBitError(RuntimeError):
    def __init__(self, cmd: list[str], returncode: int, stderr: str):
        self.cmd, self.returncode, self.stderr = cmd, returncode, stderr
        super().__init__(f"{' '.join(map(str, cmd))} exited {returncode}:\n{stderr.strip()}")


def sh(cmd: list, check: bool = True, **kw) -> subprocess.CompletedProcess:
    """subprocess.run, the command printed first as `+ cmd`."""
    cmd = [str(c) for c in cmd]
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, check=check, **kw)


def _env(extra: dict[str, str] | None) -> dict[str, str] | None:
    return dict(os.environ, **extra) if extra else None


def output_file(name: str) -> str:
    """The file stem `1bit run` writes an output under: '/' and ':' become '_'."""
    return name.replace("/", "_").replace(":", "_")


@dataclass
class RunResult:
    outputs: dict[str, np.ndarray]  # by file stem (output_file(name)); empty when the run failed
    stdout: str
    stderr: str
    returncode: int


def run(onebit: str, model: str | Path, inputs: dict[str, np.ndarray], extra: list[str] = (),
        env: dict[str, str] | None = None, out_dir: str | Path | None = None, check: bool = True,
        echo: bool = False) -> RunResult:
    """`1bit run MODEL --input NAME=NAME.npy ... -o DIR [extra]`: every .npy it writes.

    env: variables set on top of this process's environment. out_dir: where
    1bit writes (default: a temporary directory, removed afterwards). echo
    prints the command first.
    """
    with tempfile.TemporaryDirectory(prefix="onebit-run-") as tmp:
        out = Path(out_dir) if out_dir is not None else Path(tmp) / "out"
        out.mkdir(parents=True, exist_ok=True)
        cmd = [onebit, "run", str(model), "-o", str(out)]
        for name, arr in inputs.items():
            path = Path(tmp) / f"in_{output_file(name)}.npy"
            np.save(path, arr)
            cmd += ["--input", f"{name}={path}"]
        cmd += list(extra)
        if echo:
            print("+", " ".join(cmd), flush=True)
        p = subprocess.run(cmd, env=_env(env), capture_output=True, text=True)
        if p.returncode != 0:
            if check:
                raise OneBitError(cmd, p.returncode, p.stderr)
            return RunResult({}, p.stdout, p.stderr, p.returncode)
        outputs = {f.stem: np.load(f) for f in sorted(out.glob("*.npy"))}
        return RunResult(outputs, p.stdout, p.stderr, p.returncode)


@dataclass
class Dump:
    """What `1bit ort-run --dump-logits FILE.npy` writes: FILE.npy, FILE.ids.npy, FILE.prompt.npy."""
    logits: np.ndarray  # (steps, vocab) float32, one row per generated token
    ids: np.ndarray  # (steps,) the chosen ids
    prompt: np.ndarray  # (prompt length,) the prompt's ids
    stderr: str = field(default="", repr=False)  # with capture_stderr only

    @staticmethod
    def load(path: str | Path) -> "Dump":
        base = str(path)[:-4]
        return Dump(np.load(path), np.load(base + ".ids.npy"), np.load(base + ".prompt.npy"))


def ort_run(onebit: str, model: str | Path, prompt_args: list[str], n: int, dump: str | Path, extra: list[str] = (),
            env: dict[str, str] | None = None, capture_stderr: bool = False, echo: bool = True) -> Dump:
    """`1bit ort-run MODEL -n N --dump-logits DUMP --quiet PROMPT_ARGS EXTRA` (stdout discarded).

    prompt_args: ["--prompt", text] or ["--prompt-ids", "1,2,3"]. stderr goes
    to this process's stderr unless capture_stderr (then it is in Dump.stderr).
    echo prints the command first.
    """
    cmd = [str(onebit), "ort-run", str(model), "-n", str(n), "--dump-logits", str(dump), "--quiet",
           *prompt_args, *extra]
    if echo:
        print("+", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, env=_env(env), stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE if capture_stderr else None, text=True)
    if p.returncode != 0:
        raise OneBitError(cmd, p.returncode, p.stderr or "(stderr above)")
    d = Dump.load(dump)
    d.stderr = p.stderr or ""
    return d


def inspect_json(onebit: str, model: str | Path) -> dict:
    """`1bit inspect --json MODEL`."""
    cmd = [onebit, "inspect", "--json", str(model)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise OneBitError(cmd, p.returncode, p.stderr)
    return json.loads(p.stdout)


def pack(onebit: str, model: str | Path, out: str | Path, flags: list[str] = ()) -> None:
    """`1bit pack MODEL -o OUT --quiet FLAGS`."""
    sh([onebit, "pack", model, "-o", out, "--quiet", *flags])


def decode_step_profile(onebit: str, model: str | Path, prompt: int = 4, gen: int = 3) -> str:
    """The decode steps' per-op profile of `1bit bench MODEL` (ONEBIT_PROFILE=1,
    one thread): the text from its "decode steps" line on."""
    p = subprocess.run([str(onebit), "bench", str(model), "--prompt-lengths", str(prompt), "--gen", str(gen),
                        "--no-bandwidth", "--threads", "1"], env=_env({"ONEBIT_PROFILE": "1"}),
                       capture_output=True, text=True, check=True)
    out = p.stdout + p.stderr
    if "decode steps" not in out:
        raise AssertionError(f"no decode profile in:\n{out}")
    return out[out.index("decode steps"):]


def fused_counts(stderr: str) -> dict[str, int]:
    """Each fusion's `<name>_fused groups=N` line (ONEBIT_QDQ_DEBUG=1 with --verbose) as {name: N}."""
    import re

    return {k: int(v) for k, v in re.findall(r"(\w+)_fused groups=(\d+)", stderr)}
