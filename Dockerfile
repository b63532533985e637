# onceonly: one image for every command (ingest, worker, topics, lag, replay, ...).
#   docker build -t onceonly .
#   docker run --rm onceonly --help
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    ONCEONLY_RUN_DIR=/var/lib/onceonly/run \
    ONCEONLY_DATA_DIR=/var/lib/onceonly/worker

WORKDIR /app

# Every dependency has a manylinux wheel for CPython 3.11 (confluent-kafka and rocksdict
# bundle librdkafka and RocksDB), so no compiler is needed.
COPY ops/docker/requirements.lock ./requirements.lock
RUN pip install -r requirements.lock
COPY pyproject.toml README.md ./
COPY onceonly ./onceonly
COPY ingest ./ingest
COPY processors ./processors
COPY schemas ./schemas
COPY foundation ./foundation
COPY operations ./operations
COPY devstack ./devstack
# the pinned versions above are what runs: onceonly itself adds nothing
RUN pip install --no-deps . \
    && useradd --system --uid 10001 --home-dir /var/lib/onceonly --create-home onceonly \
    && mkdir -p /var/lib/onceonly/run /var/lib/onceonly/worker \
    && chown -R onceonly:onceonly /var/lib/onceonly

USER onceonly
WORKDIR /var/lib/onceonly

# ingest (ONCEONLY_INGEST_PORT) and the worker's web and metrics port (ONCEONLY_WORKER_PORT)
EXPOSE 8000 6066

ENTRYPOINT ["onceonly"]
CMD ["--help"]
