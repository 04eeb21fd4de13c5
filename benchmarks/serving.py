"""The live server under a third-party benchmark client (guidellm): TTFT, ITL and throughput.

    pip install guidellm                  # any environment; its own venv keeps its dependencies apart
    python benchmarks/serving.py --guidellm /path/to/venv/bin/guidellm

Data flow: `python -m medha_jax.demo_export` writes the demo model (weights, tokenizer.json,
tokenizer_config.json) to WORKDIR/demo_model, so guidellm can load its tokenizer from the same
directory -> `python -m medha_jax.serve --model demo_model` (defaults; cwd WORKDIR, so the served
model name is also the tokenizer's path) -> /health until it serves -> per concurrency level
one `guidellm run` (OpenAI HTTP backend, synthetic prompts of --prompt-tokens, --output-tokens
each, --requests requests, JSON report), after an untimed pass over every level (the server starts
serving before it has compiled every shape bucket: the first batches of a new shape would wait
for a compile) -> TTFT / ITL / TPOT percentiles, request and token
throughput per level -> SIGTERM (the server drains) -> results/serving[_NAME].json and .md with the
machine, load average and the guidellm version.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from results_io import provenance, run_info, write_results  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"


def wait_serving(url: str, proc: subprocess.Popen, timeout: float) -> float:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with {proc.returncode} before serving")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return time.perf_counter() - t0
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"the server did not serve within {timeout} s")


def level_stats(report: dict) -> dict:
    b = report["benchmarks"][0]
    m = b["metrics"]

    def pct(name):
        s = m[name]["successful"]
        return {"p50": s["percentiles"]["p50"], "p90": s["percentiles"]["p90"], "p99": s["percentiles"]["p99"],
                "mean": s["mean"]}

    return dict(ttft_ms=pct("time_to_first_token_ms"), itl_ms=pct("inter_token_latency_ms"),
                tpot_ms=pct("time_per_output_token_ms"), requests=m["request_totals"],
                requests_per_s=m["requests_per_second"]["successful"]["mean"],
                output_tokens_per_s=m["output_tokens_per_second"]["total"]["mean"],
                tokens_per_s=m["tokens_per_second"]["total"]["mean"], duration_s=b["duration"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--guidellm", default=shutil.which("guidellm") or "guidellm", help="the guidellm executable")
    ap.add_argument("--concurrency", default="1,4,16", help="comma-separated concurrent streams, one level each")
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--requests", type=int, default=32, help="requests per level")
    ap.add_argument("--http-port", type=int, default=8765)
    ap.add_argument("--name", default="", help="suffix of the results files")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/medha_serving"))
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    levels = [int(c) for c in args.concurrency.split(",")]
    version = subprocess.run([args.guidellm, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    args.workdir.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(args.workdir / "demo_model", ignore_errors=True)  # demo_export writes a new directory
    subprocess.run([sys.executable, "-m", "medha_jax.demo_export", str(args.workdir / "demo_model")], check=True,
                   cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    load_before = os.getloadavg()
    url = f"http://127.0.0.1:{args.http_port}"
    server = subprocess.Popen([sys.executable, "-m", "medha_jax.serve", "--model", "demo_model", "--port", "0",
                               "--http-port", str(args.http_port)], cwd=args.workdir,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
                              stderr=open(args.workdir / "server.log", "w"))
    rows = []
    try:
        start_s = wait_serving(url, server, 600)
        print(f"[serving] server up in {start_s:.1f} s", flush=True)
        def run_level(c: int, requests: int) -> dict:
            out = args.workdir / f"guidellm_c{c}.json"
            cmd = [args.guidellm, "run", "--backend", f"kind=openai_http,target={url},model=demo_model",
                   "--data", f"kind=synthetic_text,prompt_tokens={args.prompt_tokens},output_tokens={args.output_tokens}",
                   "--profile", f"kind=concurrent,streams={c}", "--constraint", f"kind=max_requests,count={requests}",
                   "--output", f"kind=json,path={out}", "--disable-console"]
            subprocess.run(cmd, cwd=args.workdir, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            return json.loads(out.read_text())

        for c in levels:  # untimed
            run_level(c, 2 * c)
        for c in levels:
            rows.append(dict(concurrency=c, **level_stats(run_level(c, args.requests))))
            r = rows[-1]
            print(f"[serving] concurrency {c}: TTFT p50 {r['ttft_ms']['p50']:.0f} ms, ITL p50 {r['itl_ms']['p50']:.1f} ms, "
                  f"{r['output_tokens_per_s']:.0f} output tok/s", flush=True)
    finally:
        server.send_signal(signal.SIGTERM)
        rc = server.wait(timeout=120)
    report = dict(run_info("serving.py", argv, load_before), client=version, server_exit=rc, start_s=start_s,
                  prompt_tokens=args.prompt_tokens, output_tokens=args.output_tokens, requests=args.requests, rows=rows)
    lines = [f"# Serving under guidellm ({version})", "", provenance(report),
             f"Server: `python -m medha_jax.serve --model demo_model` (the demo model written by "
             f"`python -m medha_jax.demo_export`, every default), up in {start_s:.1f} s, exit code {rc} after SIGTERM. "
             f"Client: `guidellm run`, OpenAI HTTP backend (streaming completions), synthetic prompts of "
             f"{args.prompt_tokens} tokens and {args.output_tokens} output tokens, {args.requests} requests per level, "
             "after an untimed pass over the levels.", "",
             "| concurrency | TTFT p50 / p90 / p99 | ITL p50 / p90 / p99 | TPOT p50 | requests/s | output tok/s | total tok/s | ok / errors |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        t, i = r["ttft_ms"], r["itl_ms"]
        lines.append(f"| {r['concurrency']} | {t['p50']:.0f} / {t['p90']:.0f} / {t['p99']:.0f} ms | "
                     f"{i['p50']:.1f} / {i['p90']:.1f} / {i['p99']:.1f} ms | {r['tpot_ms']['p50']:.1f} ms | "
                     f"{r['requests_per_s']:.2f} | {r['output_tokens_per_s']:.0f} | {r['tokens_per_s']:.0f} | "
                     f"{r['requests']['successful']} / {r['requests']['errored']} |")
    write_results(args.out, "serving" + (f"_{args.name}" if args.name else ""), report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
