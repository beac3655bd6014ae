# syntax=docker/dockerfile:1
#
# One image for pveflow's programs: the worker (`worker`), and the CLI with its codec server
# (`pveflow`, `pveflow codec-server`). Static binaries on distroless, running as the non-root
# user 65532; docker-compose.yaml builds it.
#
#   docker build -t pveflow .
#   docker run --rm pveflow worker --help

# The Go release pveflow is built and tested with (go.mod asks for 1.26.0 or later).
FROM golang:1.26.8 AS build
WORKDIR /src
COPY . .
# Only the two programs are built, so only their modules are downloaded: not the Temporal
# server's, which lives in the internal/devserver module for `make run`. The caches outlive the layer, so a rebuild after a change
# compiles only what changed.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOTOOLCHAIN=local go build -trimpath -ldflags='-s -w' -o /out/ \
        ./worker ./starter/cmd/pveflow

# static-debian12 holds CA certificates, /tmp and the nonroot user, and no shell.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/worker /out/pveflow /usr/local/bin/
# The configuration of the simulator's cluster, for `worker --simulator --config` in the image.
COPY testdata/config/simulator.yaml /usr/share/pveflow/simulator.yaml
# The build's ID in its worker deployment (worker --deployment-name): the image has no VCS
# stamp, so a release passes one, e.g. --build-arg BUILD_ID=$(git rev-parse --short=12 HEAD).
ARG BUILD_ID=""
ENV PVEFLOW_BUILD_ID=${BUILD_ID}
USER nonroot:nonroot
CMD ["worker", "--help"]
