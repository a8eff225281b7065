#!/usr/bin/env bash
# The fault suite: two receivers and two dispatchers on a three-node RabbitMQ
# cluster of their own (scripts/cluster.sh) and a Postgres instance of their
# own, under open-loop load, through the faults of a bad production day, one
# after another. It prints one line per fault and a counted report, and exits
# non-zero when an accepted event was lost or a route got more duplicate
# POSTs than the faults explain.
#
#   scripts/chaos.sh [chaos flags...]      e.g. --rate 100 --settle 8s
#                                          (the rate defaults to 100/s scaled to the free CPU)
#
# Nothing here touches the RabbitMQ on 5672 or the Postgres on 5432: the
# cluster uses CLUSTER_PREFIX (default hrchaos) and ports from
# CLUSTER_BASE_PORT (default 5731), and Postgres runs from a temporary folder
# on port 25432. The work folder (logs of every process) is kept when the
# suite fails, or with CHAOS_KEEP_LOGS=1, and its path printed.
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0; }
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/services.sh # Postgres and RabbitMQ binaries installed (and the shared services up)

export CLUSTER_PREFIX="${CLUSTER_PREFIX:-hrchaos}"
export CLUSTER_BASE_PORT="${CLUSTER_BASE_PORT:-5731}"
work=$(mktemp -d -t hookrelay-chaos-XXXXXX)
chmod 755 "$work" # Postgres runs as the postgres user below it
export CLUSTER_DIR="$work/cluster"

status=1
cleanup() {
	scripts/cluster.sh down >/dev/null 2>&1 || true
	if [[ $status -eq 0 && -z "${CHAOS_KEEP_LOGS:-}" ]]; then
		rm -rf "$work"
	else
		echo "chaos: logs kept in $work/run" >&2
	fi
}
trap cleanup EXIT

echo "chaos: building" >&2
go build -o "$work/bin/" ./cmd/receiver ./cmd/dispatcher ./cmd/hookrelay ./cmd/chaos
echo "chaos: starting a ${CLUSTER_NODES:-3}-node RabbitMQ cluster ($CLUSTER_PREFIX, ports from $CLUSTER_BASE_PORT)" >&2
scripts/cluster.sh up
eval "$(scripts/cluster.sh env)"

set +e
"$work/bin/chaos" --bin "$work/bin" --cluster scripts/cluster.sh --work "$work/run" "$@"
status=$?
set -e
exit $status
