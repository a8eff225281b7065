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

# A three-node RabbitMQ cluster of the suite's own (scripts/cluster.sh), for
# the test that kills the node a dispatcher consumes from. It starts in the
# background while the tests build; that test waits for the ready file.
work=$(mktemp -d -t hookrelay-test-XXXXXX)
export HOOKRELAY_TEST_CLUSTER_SCRIPT="$PWD/scripts/cluster.sh"
export HOOKRELAY_TEST_CLUSTER_PREFIX="${HOOKRELAY_TEST_CLUSTER_PREFIX:-hrtest}"
export HOOKRELAY_TEST_CLUSTER_BASE_PORT="${HOOKRELAY_TEST_CLUSTER_BASE_PORT:-5701}"
export HOOKRELAY_TEST_CLUSTER_DIR="$work/cluster"
export HOOKRELAY_TEST_CLUSTER_READY="$work/cluster-ready"
cluster() {
	CLUSTER_PREFIX="$HOOKRELAY_TEST_CLUSTER_PREFIX" CLUSTER_BASE_PORT="$HOOKRELAY_TEST_CLUSTER_BASE_PORT" \
		CLUSTER_DIR="$HOOKRELAY_TEST_CLUSTER_DIR" scripts/cluster.sh "$@"
}
(
	if cluster up >"$work/cluster.log" 2>&1; then
		echo ok >"$HOOKRELAY_TEST_CLUSTER_READY"
	else
		echo "cluster.sh up failed: $(tail -3 "$work/cluster.log" | tr '\n' ' ')" >"$HOOKRELAY_TEST_CLUSTER_READY"
	fi
) &
cluster_pid=$!

# The broker-alarm test raises RabbitMQ's memory alarm, which blocks every
# publisher on the broker: it runs alone, after the suite, and the watermark
# is restored however the run ends.
rabbitmqctl=$(command -v rabbitmqctl || echo /usr/sbin/rabbitmqctl)
cleanup() {
	"$rabbitmqctl" set_vm_memory_high_watermark 0.4 >/dev/null ||
		echo "test.sh: could not restore the RabbitMQ memory watermark; run: rabbitmqctl set_vm_memory_high_watermark 0.4" >&2
	wait "$cluster_pid" 2>/dev/null || true
	cluster down >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

go test -race -shuffle=on -count=1 -timeout 20m "$@" ./...

HOOKRELAY_TEST_BROKER_ALARM=1 go test -race -count=1 -timeout 5m -run '^TestBrokerAlarm' ./internal/app/
