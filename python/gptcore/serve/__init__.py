"""``gptcore serve``: an OpenAI-compatible HTTP server with continuous batching, whose answers
do not depend on the load.

One concept a module:

- ``request_parsing``: the OpenAI request bodies, checked (a 400 naming the field);
- ``sequence``: one choice being generated (its cache, its own sampler, its text);
- ``engine``: continuous batching on a worker thread, one ``Model.step_many`` per step;
- ``job``: one request's choices in flight, read on the event loop;
- ``openai_format``: the answers' and stream chunks' JSON;
- ``event_stream``: server-sent events that notice a client going away;
- ``metrics``: the Prometheus metrics;
- ``errors``: OpenAI-style error bodies;
- ``app``: the Starlette application (routes, API key);
- ``server``: uvicorn, the printed address, the graceful stop.

Needs the ``serve`` extra (``pip install 'gptcore[serve]'``: uvicorn, starlette,
prometheus_client).
"""
