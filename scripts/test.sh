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

# The broker-alarm test raises RabbitMQ's memory alarm, which blocks every
# publisher on the broker: it runs alone, after the suite, and the watermark
# is restored however the run ends.
rabbitmqctl=$(command -v rabbitmqctl || echo /usr/sbin/rabbitmqctl)
restore_watermark() {
	"$rabbitmqctl" set_vm_memory_high_watermark 0.4 >/dev/null ||
		echo "test.sh: could not restore the RabbitMQ memory watermark; run: rabbitmqctl set_vm_memory_high_watermark 0.4" >&2
}
trap restore_watermark EXIT
HOOKRELAY_TEST_BROKER_ALARM=1 go test -race -count=1 -timeout 5m -run '^TestBrokerAlarm' ./internal/app/
