#!/usr/bin/env bash
# Run the relay locally: services up, migrations, then receiver (and
# dispatcher, once built) with config.yaml, until Ctrl-C.
#
#   scripts/run.sh [CONFIG]        (default: $HOOKRELAY_CONFIG or config.yaml)
#
# scripts/services.sh says each change it makes to the machine before making
# it (README, "What the scripts change on the machine").
#
# The default config.yaml reads two secrets from the environment, and routes
# made at run time need a key every process shares (HOOKRELAY_SECRETS_KEY);
# a team's route reaches this machine's demo destinations only when
# HOOKRELAY_TEAM_ROUTES_ALLOWED_NETWORKS allows 127.0.0.0/8. For a local
# try-out this script sets demo values when they are unset and says so; set
# real ones in any shared or production environment.
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0; }
set -euo pipefail
cd "$(dirname "$0")/.."

CONFIG="${1:-${HOOKRELAY_CONFIG:-config.yaml}}"

scripts/services.sh

if [[ -z "${HOOKRELAY_DEMO_SECRET:-}" ]]; then
	export HOOKRELAY_DEMO_SECRET=demo-secret
	echo "run: HOOKRELAY_DEMO_SECRET unset, using the demo value 'demo-secret'" >&2
fi
if [[ -z "${BILLING_SIGNING_SECRET:-}" ]]; then
	export BILLING_SIGNING_SECRET=whsec_ZGVtby1zaWduaW5nLXNlY3JldC0xMjM0NTY3ODkw
	echo "run: BILLING_SIGNING_SECRET unset, using a demo value" >&2
fi
# The same key must reach every process and the CLI that makes routes
# (docs/operating.md, "Routes at run time", gives the CLI this one).
if [[ -z "${HOOKRELAY_SECRETS_KEY:-}" ]]; then
	export HOOKRELAY_SECRETS_KEY=ZGVtby1zZWNyZXRzLWtleS1ub3QtZm9yLXByb2QtMzI=
	echo "run: HOOKRELAY_SECRETS_KEY unset, using the demo key of docs/operating.md (routes at run time)" >&2
fi
# The demo's destinations are on this machine, where a team's route may not
# deliver unless the operator allows it (team_routes.allowed_networks).
if [[ -z "${HOOKRELAY_TEAM_ROUTES_ALLOWED_NETWORKS:-}" ]]; then
	export HOOKRELAY_TEAM_ROUTES_ALLOWED_NETWORKS=127.0.0.0/8
	echo "run: HOOKRELAY_TEAM_ROUTES_ALLOWED_NETWORKS unset, letting teams' routes reach this machine (127.0.0.0/8) for the demo; never in production" >&2
fi

go build -buildvcs=auto -o bin/ ./cmd/...
bin/hookrelay --config "$CONFIG" migrate

pids=()
stop() {
	trap - INT TERM
	kill -TERM "${pids[@]}" 2>/dev/null || true
	wait "${pids[@]}" 2>/dev/null || true
}
trap 'stop; exit 0' INT TERM

bin/receiver --config "$CONFIG" &
pids+=($!)
if [[ -x bin/dispatcher ]]; then
	bin/dispatcher --config "$CONFIG" &
	pids+=($!)
fi

# When one process exits on its own, stop the other and report its status.
status=0
wait -n "${pids[@]}" || status=$?
stop
exit "$status"
