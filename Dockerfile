# onceonly: one image for every command (ingest, worker, topics, lag, replay, ...).
#   docker build -t onceonly .
#   docker run --rm onceonly --help
# BASE_IMAGE is any Debian-like image with Python 3.11: the public python:3.11-slim by
# default; `make compose-test` passes a Debian bookworm built here with debootstrap
# (devstack/compose_images.py), where no registry of images is reachable.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/onceonly/bin:$PATH \
    ONCEONLY_RUN_DIR=/var/lib/onceonly/run \
    ONCEONLY_DATA_DIR=/var/lib/onceonly/worker

WORKDIR /app

# Every dependency has a manylinux wheel for CPython 3.11 (confluent-kafka and rocksdict
# bundle librdkafka and RocksDB), so no compiler is needed. A virtualenv, so that the
# same lines work on python:3.11-slim and on Debian's own python3 (PEP 668).
COPY requirements/runtime.lock ./requirements.lock
RUN python3 -m venv /opt/onceonly \
    && pip install --require-hashes --no-deps -r requirements.lock
COPY pyproject.toml README.md ./
COPY onceonly ./onceonly
# the locked versions above are what runs: onceonly itself adds nothing
RUN pip install --no-deps . \
    && useradd --system --uid 10001 --home-dir /var/lib/onceonly --create-home onceonly \
    && mkdir -p /var/lib/onceonly/run /var/lib/onceonly/worker \
    && chown -R onceonly:onceonly /var/lib/onceonly

USER onceonly
WORKDIR /var/lib/onceonly

# ingest (ONCEONLY_INGEST_PORT) and the worker's web and metrics port (ONCEONLY_WORKER_PORT)
EXPOSE 8000 6066

# ingest: GET /readyz; worker: GET /metrics; any other command (topics, lag, ...): healthy
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python3", "-m", "onceonly.operations.container_health"]

ENTRYPOINT ["onceonly"]
CMD ["--help"]
