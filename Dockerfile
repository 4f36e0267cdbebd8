# attnd in a container: build on NVIDIA's CUDA 13 devel image, run on the matching runtime
# image with cuDNN (the cudnn backend dlopens libcudnn.so.9; cuBLAS comes with the runtime).
#
#   docker build -t attnd --build-arg ATTND_COMMIT=$(git rev-parse --short=12 HEAD) .
#   docker run --gpus all -p 8080:8080 -v attnd-data:/var/lib/attnd attnd
#
# The same image runs a plan of runs without a listener (attnd batch, docs/plan.md): the
# records on stdout, one JSON line each, progress on stderr, exit 1 when a run failed:
#
#   docker run --rm --gpus all --no-healthcheck -v "$PWD/plan.json:/plan.json:ro" \
#       -v attnd-data:/var/lib/attnd attnd batch /plan.json > results.jsonl
#
# Configuration is by environment (ATTND_*: docs/operations.md lists every setting); the
# image listens on 0.0.0.0:8080 and keeps its SQLite database in the /var/lib/attnd volume
# (with ATTND_STORE=postgresql://…, the fleet's history is there and the volume keeps the
# outbox: docs/operations.md, "Fleet").
# tests/docker/check_dockerfile.py checks this file against the Makefile in `make test`.

FROM nvidia/cuda:13.0.2-cudnn-devel-ubuntu24.04 AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      make gcc g++ libmicrohttpd-dev libcjson-dev libsqlite3-dev libpq-dev python3 python3-pip \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Makefile ./
COPY common/ common/
COPY server/ server/
COPY kernels/ kernels/
COPY scripts/fetch-flashinfer.py scripts/
# The front (no CUDA) and the fat worker: sm_80 sm_86 sm_89 sm_90a (Hopper, with the wgmma kernel) and compute_90 PTX (the Makefile's default GENCODE).
# The context has no .git: the commit comes as a build argument (attnd --version, "build").
ARG ATTND_COMMIT=unknown
RUN make -j"$(nproc)" BUILD=/out ATTND_COMMIT="$ATTND_COMMIT" /out/attnd /out/attnd-worker \
 && mkdir -p /out/lib \
 && cp -L /usr/local/cuda/lib64/libcupti.so.13 /out/lib/
# The flashinfer variant's module, /out/lib/libattnd_flashinfer.so (kernels/flashinfer/README.md):
# `make flashinfer` fetches FlashInfer's wheel from PyPI (pip download) and compiles its
# headers for sm_90a and sm_80, the architectures FlashInfer's prefill paths target.
RUN make -j"$(nproc)" BUILD=/out flashinfer

FROM nvidia/cuda:13.0.2-cudnn-runtime-ubuntu24.04
# Runtime libraries of the Makefile's LDLIBS (libcupti is copied from the build stage: the
# runtime image does not carry CUPTI), curl for the HEALTHCHECK.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libmicrohttpd12t64 libcjson1 libsqlite3-0 libpq5 curl ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --home-dir /var/lib/attnd --shell /usr/sbin/nologin attnd \
 && mkdir -p /var/lib/attnd \
 && chown attnd:attnd /var/lib/attnd
# The front starts attnd-worker from its own folder; both find lib/ beside them through its rpath ($ORIGIN/lib), the dashboard in
# ../clients/dashboard, the OpenAPI document in ../docs and the model presets in ../config
# (server/front/install_path.c).
COPY --from=build /out/attnd /out/attnd-worker /opt/attnd/bin/
COPY --from=build /out/lib/ /opt/attnd/bin/lib/
COPY clients/dashboard/ /opt/attnd/clients/dashboard/
COPY docs/openapi.json /opt/attnd/docs/openapi.json
COPY config/models.json /opt/attnd/config/models.json
COPY deploy/docker-healthcheck.sh /opt/attnd/bin/healthcheck
ENV ATTND_LISTEN=0.0.0.0:8080 \
    ATTND_DATA_DIR=/var/lib/attnd \
    ATTND_LOG_LEVEL=info
VOLUME ["/var/lib/attnd"]
EXPOSE 8080
USER attnd
WORKDIR /opt/attnd
HEALTHCHECK --interval=30s --timeout=5s --start-period=90s --retries=3 CMD ["/opt/attnd/bin/healthcheck"]
# SIGTERM (docker stop) drains: give it longer than the default 10 s (docker run --stop-timeout).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/opt/attnd/bin/attnd"]
