"""Serving front ends over one AsyncEngine, on one asyncio loop.

  app.py              ServingApp: starts/stops both front ends (ports, TLS, auth, limits, timeouts)
  grpc_service.py     medha.v1.Medha servicer (grpc.aio): Generate (server streaming), Health, ModelInfo
  grpc_standard.py    grpc.health.v1 over the engine's state, and server reflection
  proto_text.py       which string field of a serialized request is not UTF-8 (to name it)
  openai_http.py      aiohttp routes: /v1/completions, /v1/chat/completions (JSON or SSE), /v1/models,
                      /health, /metrics
  openai_protocol.py  OpenAI JSON <-> OpenAIRequest / response dicts
  http_deadlines.py   slow-client deadlines: request headers (408 and close), body (408)
  validation.py       shared field checks -> SamplingParams, prompt ids; RequestError names the field
  chat_template.py    messages -> prompt text (jinja2, sandboxed)
  auth.py             bearer tokens (gRPC interceptor, aiohttp middleware), TLS contexts
  metrics.py          Prometheus registry: engine gauges, TTFT/TPOT/iteration histograms
  config.py           ServerConfig (its field docs are `serve --help`)
"""
