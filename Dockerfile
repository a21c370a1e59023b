# idemgate container image.
#
#   docker build -t idemgate .
#   docker run --rm --stop-timeout 45 -p 8080:8080 -p 8790:8790 \
#     -e IDEMGATE_ADMIN_TOKEN=... -e IDEMGATE_WEBHOOK_SECRET=... \
#     idemgate                                  # the default config (below)
#   docker run --rm --stop-timeout 45 -p 8080:8080 -p 8790:8790 \
#     -v "$PWD/my-idemgate.toml:/etc/idemgate/idemgate.toml:ro" \
#     -e PAYMENTS_SECRET=... -e IDEMGATE_ADMIN_TOKEN=... \
#     idemgate                                  # your own
#
# Configuration: the image's default, config/container.toml at
# /etc/idemgate/idemgate.toml, listens on 0.0.0.0 (proxy 8080, admin 8790),
# keeps its records in the embedded store under /var/lib/idemgate and
# forwards to http://127.0.0.1:3000; it reads its admin token and its
# signature secret from IDEMGATE_ADMIN_TOKEN and IDEMGATE_WEBHOOK_SECRET and
# refuses to start without them (exit 2, naming the variable), so a bare
# `docker run` is either healthy or stopped, never open. The annotated
# reference (config/idemgate.toml) is at /usr/share/doc/idemgate/.
#
# For real deployments mount your own file over the default (or elsewhere,
# pointing IDEMGATE_CONFIG at it; see below). Inside a container that file
# must listen on 0.0.0.0 (127.0.0.1 is unreachable from outside the
# container), and its [store] url / [upstream] url must name addresses that
# are reachable from the container (127.0.0.1 is the container itself,
# unless it shares the pod's or host's network namespace, as a sidecar does).
# Secrets come from the environment (env:NAME) or mounted files (file:PATH),
# the Redis password too ([store] password = "env:NAME").
# Validate a file with: docker run --rm -v ... idemgate check-config
#
# --stop-timeout: docker stop waits 10s by default before SIGKILL; give it
# more than [limits] shutdown_grace (30s) so in-flight calls can finish.
#
# Point at your file by mounting it over the default path or by setting
# IDEMGATE_CONFIG, not with `serve --config PATH`: the HEALTHCHECK below runs
# `idemgate healthcheck`, which finds the admin listener through
# IDEMGATE_CONFIG and would otherwise probe the default file's admin
# address instead of yours.
#
# The admin listener serves /healthz (liveness) and /readyz (store
# reachable) for orchestrator probes. With [store] kind = "embedded", a
# relative path such as "data/idemgate.redb" lands under the working
# directory /var/lib/idemgate: mount a volume there to keep it.

# ---- build ------------------------------------------------------------------
FROM rust:1.95-bookworm AS builder
WORKDIR /build

# Dependencies first, against placeholder sources, so this layer stays cached
# until Cargo.toml or Cargo.lock change.
COPY Cargo.toml Cargo.lock ./
RUN mkdir src \
    && echo '//! placeholder' > src/lib.rs \
    && echo 'fn main() {}' > src/main.rs \
    && cargo build --release --locked \
    && rm -rf src

# The real sources. lua/ must be in the build context: the Redis scripts are
# embedded into the binary with include_str! at compile time.
COPY src ./src
COPY lua ./lua
# build.rs sets IDEMGATE_VERSION, which src/main.rs reads with env!: without
# it the crate does not compile. .git/ is not in the build context
# (.dockerignore), so `idemgate --version` shows the crate version alone, and
# idemgate_build_info's revision label is this build argument, or "unknown":
#   docker build --build-arg IDEMGATE_GIT_REVISION="$(git rev-parse --short=12 HEAD)" .
COPY build.rs ./
ARG IDEMGATE_GIT_REVISION=""
# COPY keeps the files' original mtimes, which can be older than the
# placeholder build; touch them so cargo rebuilds the crate itself.
RUN touch src/lib.rs src/main.rs \
    && cargo build --release --locked \
    && ./target/release/idemgate --version

# ---- runtime ----------------------------------------------------------------
FROM debian:bookworm-slim

# Where the image was built from: docker build --build-arg SOURCE_URL=https://…
ARG SOURCE_URL=""
LABEL org.opencontainers.image.title="idemgate" \
      org.opencontainers.image.description="Idempotency sidecar: verifies webhook signatures, deduplicates at-least-once deliveries, replays stored answers" \
      org.opencontainers.image.licenses="MIT OR Apache-2.0" \
      org.opencontainers.image.source="${SOURCE_URL}"

RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 idemgate \
    && useradd --system --uid 10001 --gid idemgate \
        --home-dir /var/lib/idemgate --no-create-home \
        --shell /usr/sbin/nologin idemgate \
    && mkdir -p /etc/idemgate /var/lib/idemgate \
    && chown idemgate:idemgate /var/lib/idemgate

COPY --from=builder /build/target/release/idemgate /usr/local/bin/idemgate
# The container default (listens on 0.0.0.0, refuses to start without its
# secrets); the annotated reference beside the licences.
COPY config/container.toml /etc/idemgate/idemgate.toml
COPY config/idemgate.toml LICENSE-MIT LICENSE-APACHE /usr/share/doc/idemgate/

ENV IDEMGATE_CONFIG=/etc/idemgate/idemgate.toml
WORKDIR /var/lib/idemgate
# 8080: proxy (senders deliver here); 8790: admin (/metrics, /healthz,
# /readyz, /admin/*). The default config listens on 0.0.0.0; a file of
# yours must too.
EXPOSE 8080 8790
# Numeric, so that Kubernetes' runAsNonRoot can verify it (a user name
# cannot be checked and the pod is refused). 10001 = idemgate, created above.
USER 10001:10001

# Docker's health status from the admin listener's /healthz, without a shell
# or curl in the image: `idemgate healthcheck` reads IDEMGATE_CONFIG, GETs
# /healthz on [listen].admin (0.0.0.0 is probed as 127.0.0.1), exit 0 or 1.
# Kubernetes ignores this; it uses the pod's probes (config/deploy/kubernetes.yaml).
# Podman keeps it only in Docker-format images (podman build --format docker).
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["/usr/local/bin/idemgate", "healthcheck"]

# Exec form: idemgate is PID 1 and receives SIGTERM directly, which starts its
# graceful shutdown (stop accepting, finish in-flight work within
# [limits].shutdown_grace).
ENTRYPOINT ["/usr/local/bin/idemgate"]
CMD ["serve"]
