# Two stages: build with the pinned Rust toolchain, run on a slim Debian as a non-root user.
FROM rust:1.95.0-slim-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends cmake pkg-config libssl-dev g++ make \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY .cargo .cargo
COPY src src
RUN cargo build --release --locked --bin paycred

FROM debian:bookworm-20251117-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends libssl3 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /var/lib/paycred --create-home paycred
COPY --from=build /src/target/release/paycred /usr/local/bin/paycred
COPY conf /etc/paycred
USER 10001
WORKDIR /var/lib/paycred
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/paycred"]
CMD ["serve", "-c", "/etc/paycred/paycred.yaml"]
