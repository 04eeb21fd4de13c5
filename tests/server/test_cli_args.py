"""serve's flags come from the config dataclasses: every LLM(...) option, same default, its docstring as help."""

from __future__ import annotations

import dataclasses

import pytest

from medha_jax.cli_args import field_docs
from medha_jax.config import EngineConfig
from medha_jax.scheduler import SchedulerConfig
from medha_jax.serve import build_parser, parse_configs
from server.config import ServerConfig


def _actions():
    return {a.dest: a for a in build_parser()._actions}


@pytest.mark.parametrize("cls", [EngineConfig, SchedulerConfig, ServerConfig])
def test_every_field_is_a_flag_with_the_same_default_and_its_docstring(cls):
    actions = _actions()
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        a = actions[f.name]
        assert a.option_strings[0] == "--" + f.name.replace("_", "-")
        assert a.default == f.default, f.name
        assert docs[f.name] and a.help.startswith(docs[f.name].replace("%", "%%")), f.name


def test_parsed_defaults_build_the_same_configs_as_llm():
    e, s, srv, _ = parse_configs([])
    assert e == EngineConfig() and s == SchedulerConfig() and srv == ServerConfig()


def test_flags_parse_types_bools_and_none():
    e, s, srv, _ = parse_configs(["--model", "/m/llama", "--mesh", "tp=8,spp=4", "--num-pages", "64", "--no-warmup",
                                  "--kv-cache-memory-gb", "1.5", "--max-model-len", "none", "--policy", "lars",
                                  "--t-target", "0.04", "--port", "0", "--http-port", "-1", "--api-key", "k"])
    assert (e.model, e.mesh, e.num_pages, e.warmup, e.kv_cache_memory_gb, e.max_model_len) == (
        "/m/llama", "tp=8,spp=4", 64, False, 1.5, None)
    assert s.policy == "lars" and s.t_target == 0.04
    assert srv.port == 0 and srv.http_port == -1 and srv.api_key == "k" and srv.host == "127.0.0.1"


@pytest.mark.parametrize("argv, words", [
    (["--page-size", "3"], "page_size"),
    (["--num-pages", "many"], "num_pages"),
    (["--policy", "random"], "policy"),
    (["--tls-cert", "/nonexistent.pem", "--tls-key", "/nonexistent.key"], "tls_cert"),
    (["--tls-cert", "/nonexistent.pem"], "tls_key"),
    (["--port", "-1", "--http-port", "-1"], "both"),
    (["--max-queue", "0"], "max_queue"),
    (["--header-timeout", "0"], "header_timeout"),
    (["--idle-timeout", "nan"], "idle_timeout"),
])
def test_bad_flags_exit_2_naming_the_field(argv, words, capsys):
    with pytest.raises(SystemExit) as e:
        parse_configs(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert words in err.replace("-", "_") or words in err, err


def test_api_key_from_environment(monkeypatch):
    monkeypatch.setenv("MEDHA_API_KEY", "from-env")
    assert parse_configs([])[2].api_key == "from-env"
    assert parse_configs(["--api-key", "flag"])[2].api_key == "flag"
