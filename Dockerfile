# hookrelay: one image with all three binaries (receiver, dispatcher, hookrelay).
# Pick the program with the container command, e.g. `receiver`, `dispatcher`,
# `hookrelay migrate`. Configuration: /etc/hookrelay/config.yaml (HOOKRELAY_CONFIG)
# plus HOOKRELAY_* environment overrides.

# The golang images set GOTOOLCHAIN=local, so this must be at least the `go` line of
# go.mod; the floating 1.26 tag always is the newest 1.26.x.
ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src

# Dependencies first, so that this layer is reused while only the code changes.
COPY go.mod go.sum ./
RUN go mod download && go mod verify

COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/ ./cmd/... ./examples/destination \
	&& for bin in receiver dispatcher hookrelay destination; do \
		test -x "/out/$bin" || { echo "missing binary: $bin (expected ./cmd/$bin)" >&2; exit 1; }; \
	done

# Debian slim rather than distroless: the compose health checks need curl, and the
# dispatcher needs CA certificates for HTTPS endpoints.
FROM debian:bookworm-slim

RUN apt-get update \
	&& apt-get install -y --no-install-recommends ca-certificates curl tzdata \
	&& rm -rf /var/lib/apt/lists/* \
	&& groupadd --system --gid 10001 hookrelay \
	&& useradd --system --uid 10001 --gid hookrelay --no-create-home \
		--home-dir /nonexistent --shell /usr/sbin/nologin hookrelay

COPY --from=build /out/ /usr/local/bin/
COPY config.yaml /etc/hookrelay/config.yaml

ENV HOOKRELAY_CONFIG=/etc/hookrelay/config.yaml

# Numeric, so that runAsNonRoot-style checks can verify it.
USER 10001:10001

# receiver 8080, dispatcher 8081 (health, readiness, metrics).
EXPOSE 8080 8081

CMD ["receiver"]
