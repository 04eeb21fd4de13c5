"""Write the embedded demo model to a directory, so tools that read files can use it.

  python -m medha_jax.demo_export OUT_DIR
    -> OUT_DIR/params + medha_config.json    the demo's weights (Orbax, `checkpoint.orbax_io`)
       OUT_DIR/tokenizer.json                its byte-level tokenizer (HF `tokenizers` format)
       OUT_DIR/tokenizer_config.json         bos/eos tokens and the chat template, so
                                             `transformers.AutoTokenizer.from_pretrained(OUT_DIR)`
                                             (what benchmark clients such as guidellm call) loads it

`LLM(model=OUT_DIR)` then serves the same model as `LLM(model="demo")` (same `--seed`), token for token.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import jax

from medha_jax.demo_model import DEMO_CONFIG, byte_tokenizer, load_demo
from medha_jax.mesh import make_mesh


def write_demo(out_dir: str | Path, seed: int = 0) -> Path:
    """Write the demo's weights and tokenizer files into a new directory `out_dir`.

    seed: the weights seed, as `LLM(model="demo", seed=...)` takes it (the engine's default 0)."""
    out = Path(out_dir).absolute()
    if out.exists():
        raise FileExistsError(f"{str(out)!r} already exists; give a new directory")
    from medha_jax.checkpoint.orbax_io import save_params

    mesh = make_mesh("tp=1", devices=jax.devices()[:1])
    cfg, params, _ = load_demo(mesh, seed=seed)
    save_params(out, cfg, params, mesh)
    tok = byte_tokenizer()
    tok.tok.save(str(out / "tokenizer.json"))
    conf = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": tok.bos_token, "eos_token": tok.eos_token,
            "chat_template": tok.chat_template, "model_max_length": DEMO_CONFIG.max_position_embeddings,
            "clean_up_tokenization_spaces": False}
    (out / "tokenizer_config.json").write_text(json.dumps(conf, indent=2) + "\n")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir", help="a directory that does not exist yet")
    ap.add_argument("--seed", type=int, default=0, help="weights seed, as LLM(model='demo', seed=...) (default 0)")
    args = ap.parse_args(argv)
    print(f"wrote {write_demo(args.out_dir, args.seed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
