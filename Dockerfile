# The gateway's image (deploy/compose/ builds it; `docker build -t ignara-gateway .` too).
#
# `build` makes a virtual environment in /opt/ignara from wheels: the ones the host built
# in .compose/wheels/ (dependencies) and .compose/self/ (the gateway) when there are some
# (`make compose-up` does: HTTPS does not verify inside a build on machines like the CI's,
# see README "Docker compose"), otherwise from PyPI. `gateway` copies that environment onto a bare Debian with python3: no
# compilers, no pip, a non-root user. `fake-upstream` is the same runtime serving
# bench/upstream.py, the OpenAI-compatible stand-in the compose stack calls models on.
#
# The console's front-end packages (gateway/console/static/vendor) come from npm on the
# host: run `make console-assets` before building, or the console has no Swagger UI.
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${BASE_IMAGE} AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      python3 python3-venv ca-certificates \
 && rm -rf /var/lib/apt/lists/*
# The dependencies first, in a layer of their own: it is rebuilt only when they change.
# (`wheel[s]`: the host's wheel directory when there is one, nothing otherwise.)
COPY pyproject.toml .compose/wheel[s] /deps/
RUN python3 -m venv /opt/ignara \
 && python3 -c "import tomllib; print('\n'.join(tomllib.load(open('/deps/pyproject.toml', 'rb'))['project']['dependencies']))" > /deps/requirements.txt \
 && if ls /deps/*.whl >/dev/null 2>&1; then \
      /opt/ignara/bin/pip install --no-cache-dir --no-index --find-links /deps -r /deps/requirements.txt; \
    else \
      /opt/ignara/bin/pip install --no-cache-dir -r /deps/requirements.txt; \
    fi
COPY . /src
RUN if ls /src/.compose/self/ignara_gateway-*.whl >/dev/null 2>&1; then \
      /opt/ignara/bin/pip install --no-cache-dir --no-index --no-deps /src/.compose/self/ignara_gateway-*.whl; \
    else \
      /opt/ignara/bin/pip install --no-cache-dir --no-deps /src; \
    fi \
 && /opt/ignara/bin/pip uninstall -y pip \
 && mkdir -p /opt/share \
 && cp -r /src/policies /opt/share/policies \
 && cp /src/config/ignara.example.yaml /opt/share/

FROM ${BASE_IMAGE} AS runtime
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      python3 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /var/lib/ignara --create-home ignara
COPY --from=build /opt/ignara /opt/ignara
COPY --from=build /opt/share /usr/share/ignara
ENV PATH=/opt/ignara/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    IGNARA_POLICY_DIR=/usr/share/ignara/policies/rego \
    IGNARA_HOST=0.0.0.0 \
    IGNARA_PORT=8080
WORKDIR /var/lib/ignara
USER ignara

FROM runtime AS fake-upstream
COPY bench/upstream.py /usr/share/ignara/upstream.py
EXPOSE 9000
CMD ["python3", "/usr/share/ignara/upstream.py", "--host", "0.0.0.0", "--port", "9000"]

FROM runtime AS gateway
EXPOSE 8080
HEALTHCHECK --interval=5s --timeout=3s --start-period=60s --retries=3 \
  CMD ["python3", "-c", "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)"]
CMD ["ignara", "serve", "--seed", "/usr/share/ignara/ignara.example.yaml"]
