"""Start-up time to the first token, cold (empty caches) and warm (restart), for the ways users
start medha-jax: `scripts/serve.sh` (the server), the README's `LLM(...)` example, and `LLM(model=dir)`
with every default on a checkpoint directory (the 31M benchmark Llama, random weights).

    python benchmarks/startup.py                  # all three, cold then warm, results/startup_cpu.md
    python benchmarks/startup.py --cases python,checkpoint --rounds 2

Data flow, per case and round: a fresh directory for the XLA compilation cache and the runtime
profiles (cold) -> the process started with exactly the command users run (serve.sh's
`python -m medha_jax.serve` line with its shape flags, ports 0; the README's Python lines) ->
serve: wait for "HTTP listening on URL", POST /v1/completions (max_tokens 1) -> first token;
python / checkpoint: the script prints when `generate` returns (checkpoint: 2 prompts of 64 tokens,
24 new; then the offline job, 16 x 512 + 64, twice on other prompts, each timed) -> seconds from
process start to first token, with what the engine logged about compiles -> the same directories again (warm restart) ->
results/startup_<machine>.json and .md, with the load average around each run.
The virtual environment is assumed installed (serve.sh's first-run pip install is not timed).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_io import commit, cpu_model, write_results  # noqa: E402


def serve_command() -> list[str]:
    """The python command of scripts/serve.sh with its flags (read from the script, not copied)."""
    text = (ROOT / "scripts" / "serve.sh").read_text()
    line = re.search(r"exec python (-m medha_jax\.serve.*?)\"\$@\"", text, re.S).group(1)
    return [sys.executable] + shlex.split(line.replace("\\\n", " "))


README_EXAMPLE = """
import time; t0 = time.perf_counter()
from medha_jax import LLM, SamplingParams
llm = LLM(model="demo", mesh="tp=1", dtype="float32", scheduler="slo",
          max_model_len=2048, num_pages=256, max_num_seqs=8, max_num_batched_tokens=256,
          compilation_cache_dir={cache!r}, profile_dir={profiles!r})
t_built = time.perf_counter()
outs = llm.generate(["Hello", [5, 6, 7]], SamplingParams(max_tokens=24, temperature=0.0))
print("FIRST", time.perf_counter() - t0, t_built - t0, flush=True)
"""

CHECKPOINT_EXAMPLE = """
import time; t0 = time.perf_counter()
import sys; sys.path.insert(0, {bench!r})
from dummy_models import batch_prompts
from medha_jax import LLM, SamplingParams
llm = LLM(model={model!r}, dtype="float32", load_format="dummy", compilation_cache_dir={cache!r}, profile_dir={profiles!r})
t_built = time.perf_counter()
outs = llm.generate(batch_prompts(2, 64, 8192), SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True))
print("FIRST", time.perf_counter() - t0, t_built - t0, flush=True)
t1 = time.perf_counter()
llm.generate(batch_prompts(16, 512, 8192, 1), SamplingParams(max_tokens=64, temperature=0.0, ignore_eos=True))
print("JOB", time.perf_counter() - t1, flush=True)
t2 = time.perf_counter()
llm.generate(batch_prompts(16, 512, 8192, 2), SamplingParams(max_tokens=64, temperature=0.0, ignore_eos=True))
print("AGAIN", time.perf_counter() - t2, flush=True)
"""


def _env() -> dict:
    env = dict(os.environ)
    for k in ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "XLA_FLAGS"):
        env.pop(k, None)  # the engine's own cache setting, as a user gets it
    env["JAX_PLATFORMS"] = "cpu"
    return env


def run_serve(workdir: Path, timeout: float) -> dict:
    cmd = serve_command() + ["--port", "0", "--http-port", "0", "--compilation-cache-dir", str(workdir / "xla"),
                             "--profile-dir", str(workdir / "profiles")]
    t0 = time.perf_counter()
    log = open(workdir / "serve.log", "a")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=_env(), cwd=ROOT)
    try:
        url = None
        for line in p.stdout:
            log.write(line)
            m = re.search(r"HTTP listening on (http://\S+)", line)
            if m:
                url = m.group(1)
                break
            if time.perf_counter() - t0 > timeout:
                break
        if url is None:
            raise RuntimeError(f"server never listened; see {workdir / 'serve.log'}")
        listening = time.perf_counter() - t0
        body = json.dumps({"model": "demo", "prompt": "Hello", "max_tokens": 1, "temperature": 0}).encode()
        req = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            json.load(r)
        first = time.perf_counter() - t0
        return {"first_token_s": round(first, 2), "listening_s": round(listening, 2)}
    finally:
        p.terminate()
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
        log.close()


def run_python(workdir: Path, timeout: float) -> dict:
    code = README_EXAMPLE.format(cache=str(workdir / "xla"), profiles=str(workdir / "profiles"))
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), cwd=ROOT,
                         timeout=timeout)
    wall = time.perf_counter() - t0
    (workdir / "python.log").write_text(out.stdout + out.stderr)
    m = re.search(r"FIRST (\S+) (\S+)", out.stdout)
    if out.returncode or not m:
        raise RuntimeError(f"the README example failed; see {workdir / 'python.log'}")
    inside, built = float(m.group(1)), float(m.group(2))  # from the script's first line (imports included)
    return {"first_token_s": round(inside, 2), "process_wall_s": round(wall, 2),
            "llm_built_s": round(built, 2)}


def run_checkpoint(workdir: Path, timeout: float) -> dict:
    from dummy_models import LLAMA_31M, write_model_dir

    model = write_model_dir(workdir, "llama-31m", LLAMA_31M)  # config and tokenizer; the weights are random
    code = CHECKPOINT_EXAMPLE.format(bench=str(Path(__file__).resolve().parent), model=str(model),
                                     cache=str(workdir / "xla"), profiles=str(workdir / "profiles"))
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), cwd=ROOT,
                         timeout=timeout)
    wall = time.perf_counter() - t0
    (workdir / "checkpoint.log").write_text(out.stdout + out.stderr)
    m, j = re.search(r"FIRST (\S+) (\S+)", out.stdout), re.search(r"JOB (\S+)", out.stdout)
    again = re.search(r"AGAIN (\S+)", out.stdout)
    if out.returncode or not m or not j or not again:
        raise RuntimeError(f"the checkpoint example failed; see {workdir / 'checkpoint.log'}")
    return {"first_token_s": round(float(m.group(1)), 2), "llm_built_s": round(float(m.group(2)), 2),
            "job_s": round(float(j.group(1)), 2), "again_s": round(float(again.group(1)), 2),
            "process_wall_s": round(wall, 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default="serve,python,checkpoint")
    ap.add_argument("--rounds", type=int, default=1, help="cold+warm pairs per case")
    ap.add_argument("--timeout", type=float, default=1200.0)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--name", default="startup_cpu")
    args = ap.parse_args(argv)
    runners = {"serve": run_serve, "python": run_python, "checkpoint": run_checkpoint}
    rows = []
    for rnd in range(args.rounds):
        for case in args.cases.split(","):
            workdir = Path(tempfile.mkdtemp(prefix=f"medha_startup_{case}_"))
            for phase in ("cold", "warm"):
                load0 = os.getloadavg()[0]
                r = runners[case](workdir, args.timeout)
                r.update(case=case, phase=phase, round=rnd + 1, load_before=round(load0, 2),
                         load_after=round(os.getloadavg()[0], 2))
                rows.append(r)
                print(json.dumps(r), flush=True)
    report = {"machine": cpu_model(), "cores": os.cpu_count(), "commit": commit(), "rows": rows,
              "serve_command": " ".join(shlex.quote(c) for c in serve_command()[1:])}
    lines = [f"# Start-up to first token ({time.strftime('%Y-%m-%d')})", "",
             f"`python benchmarks/startup.py --cases {args.cases} --rounds {args.rounds}`", "",
             f"Machine: {report['machine']} x {report['cores']} cores, commit {report['commit']}. Cold: empty compilation "
             "cache and profile directories; warm: the same directories again (a restart). The venv is installed "
             "beforehand. serve: process start to the HTTP response of a 1-token completion; python: process start "
             "(interpreter start excluded) to `generate` returning 24 tokens for 2 prompts; checkpoint: the same "
             "for `LLM(model=dir, dtype=\"float32\", load_format=\"dummy\")` on the 31M Llama (2 prompts of 64 "
             "tokens, 24 new), then its offline job (16 x 512 + 64) in the same process, and again on other "
             "prompts.", "",
             "| case | phase | round | first token | detail | load before->after |", "|---|---|---|---|---|---|"]
    for r in rows:
        detail = (f"listening after {r['listening_s']} s" if r["case"] == "serve"
                  else f"LLM built after {r['llm_built_s']} s, process wall {r['process_wall_s']} s"
                  + (f", then the offline job {r['job_s']} s and again (other prompts) {r['again_s']} s"
                     if "job_s" in r else ""))
        lines.append(f"| {r['case']} | {r['phase']} | {r['round']} | {r['first_token_s']} s | {detail} | "
                     f"{r['load_before']}->{r['load_after']} |")
    write_results(args.out, args.name, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
