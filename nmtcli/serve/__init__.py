"""`nmt serve`: translation over HTTP, LibreTranslate-compatible, with dynamic batching.

    models.py    the model dirs served, each known by its language pair
    batching.py  lines of concurrent requests gathered for a few milliseconds and translated together
    requests.py  reading and checking request bodies (JSON or forms) into what to translate
    app.py       the Starlette app: the routes, API keys, limits, metrics, the page
    metrics.py   Prometheus counters and histograms, in the text exposition format
    page.html    the one self-contained page GET / answers with

Needs the `serve` extra (Starlette, uvicorn, python-multipart); `nmtcli/cli/serve.py` runs it on uvicorn.
"""
