# Two stages: build with the pinned Rust toolchain, run on a slim Debian as a non-root user.
# `scripts/container-check` (run by CI) builds and runs it without a container engine.
#
#   docker build -t paycred .
#   (umask 077; echo "PAYCRED_MASTER_KEY=$(paycred master-key)" > paycred.env)   # once
#   docker run -p 8080:8080 --env-file paycred.env \
#     -v paycred-data:/var/lib/paycred/data -v $PWD/conf:/var/lib/paycred/conf:ro paycred
FROM rust:1.95.0-slim-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends cmake pkg-config libssl-dev g++ make \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY .cargo .cargo
# The manifest declares the criterion benches and the load bench's programs, all under
# benches/ (cargo refuses a manifest whose targets are missing), and the demo page embeds
# the browser SDK's source.
COPY benches benches
COPY sdk/js/src sdk/js/src
COPY src src
RUN cargo build --release --locked --bin paycred

FROM debian:bookworm-20251117-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends libssl3 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /var/lib/paycred --create-home paycred \
 && install -d -m 700 -o paycred -g paycred /var/lib/paycred/data
COPY --from=build /src/target/release/paycred /usr/local/bin/paycred
WORKDIR /var/lib/paycred
# The config's relative paths (keys, data_dir, master_key_file) start from its directory:
# the store is /var/lib/paycred/conf/data, writable by paycred only.
COPY conf conf
RUN install -d -m 0700 -o paycred -g paycred /var/lib/paycred/conf/data
# The config listens on loopback; in a container it must take connections from outside.
ENV PAYCRED_LISTEN=0.0.0.0:8080
USER 10001
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/paycred"]
CMD ["serve", "-c", "conf/paycred.yaml"]
