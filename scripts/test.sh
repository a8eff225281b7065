#!/usr/bin/env bash
# Run the whole test suite with the race detector against real Postgres and
# RabbitMQ (started, or installed, by scripts/services.sh).
#
#   scripts/test.sh [go test flags...]
#
# With CI=true a test that cannot reach Postgres or RabbitMQ fails instead of
# skipping.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/services.sh

# Tests create their own databases next to this one and their own
# uniquely-prefixed RabbitMQ names, and remove them afterwards.
export HOOKRELAY_TEST_DATABASE_URL="${HOOKRELAY_TEST_DATABASE_URL:-postgres://postgres:postgres@127.0.0.1:5432/postgres?sslmode=disable}"

go test -race -shuffle=on -count=1 -timeout 20m "$@" ./...
