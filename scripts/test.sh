#!/usr/bin/env bash
# Run the whole test suite with the race detector against real Postgres and
# RabbitMQ (started, or installed, by scripts/services.sh).
#
#   scripts/test.sh [go test flags...]
#
# With CI=true a test that cannot reach Postgres or RabbitMQ fails instead of
# skipping.
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0; }
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/services.sh --browser # the console's tests drive Debian's chromium

# Tests create their own databases next to this one and their own
# uniquely-prefixed RabbitMQ names, and remove them afterwards.
export HOOKRELAY_TEST_DATABASE_URL="${HOOKRELAY_TEST_DATABASE_URL:-postgres://postgres:postgres@127.0.0.1:5432/postgres?sslmode=disable}"

# Timing bounds in the tests (how soon a change is followed, how long a
# wait may take) are written for one test alone on an idle machine and
# widened by HOOKRELAY_TEST_SLOWDOWN (internal/testenv.Scaled). Unless set,
# it is sized here from the CPU found free over a second, as the fault suite
# sizes its load: 3 on an idle machine (the suite runs its packages side by
# side under the race detector), 3 / (free share) on a busier one, at most 12.
if [[ -z "${HOOKRELAY_TEST_SLOWDOWN:-}" ]]; then
	cpu() { awk '/^cpu /{print $2+$3+$4+$5+$6+$7+$8+$9, $5+$6}' /proc/stat; }
	read -r total0 idle0 < <(cpu)
	sleep 1 # a measurement window, not a synchronisation
	read -r total1 idle1 < <(cpu)
	HOOKRELAY_TEST_SLOWDOWN=$(awk -v t="$((total1 - total0))" -v i="$((idle1 - idle0))" 'BEGIN {
		free = (t > 0) ? i / t : 1; if (free < 0.25) free = 0.25
		f = 3 / free; if (f < 3) f = 3; if (f > 12) f = 12; printf "%.1f", f }')
	echo "test: $(awk -v t="$((total1 - total0))" -v i="$((idle1 - idle0))" 'BEGIN { printf "%.0f", (t > 0) ? 100 * i / t : 100 }')% of the CPU free: timing bounds widened ${HOOKRELAY_TEST_SLOWDOWN}x (HOOKRELAY_TEST_SLOWDOWN)" >&2
fi
export HOOKRELAY_TEST_SLOWDOWN

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

# gotestsum (a tool in go.mod) prints a line per package as it finishes,
# every failure in full, and the counts at the end.
gotestsum() { go tool gotestsum --format pkgname-and-test-fails --format-hide-empty-pkg "$@"; }

# internal/app is most of the run (its tests wait on timers: grace periods,
# reconnects, retry tiers), so it starts at once, beside the other packages
# run one at a time: two test binaries at once, as go test's -p 2 ran them
# on a 2-CPU machine. In one go test, internal/app started after most
# packages had run, and the phase's last 3 of 12 minutes were it alone.
app=github.com/hookrelay/hookrelay/internal/app
others=$(go list ./... | grep -vx "$app")
echo "test: building and running the tests of $(go list ./... | wc -l) packages with the race detector (about 8 minutes); internal/app beside the others" >&2
status=0
gotestsum --jsonfile "$work/app.json" -- -race -shuffle=on -count=1 -timeout 20m -skip '^TestBrokerAlarm' "$@" "$app" &
app_pid=$!
# shellcheck disable=SC2086 # one word per package
gotestsum --jsonfile "$work/tests.json" -- -race -shuffle=on -count=1 -timeout 20m -p 1 "$@" $others || status=$?
wait "$app_pid" || status=$?
cat "$work/app.json" >>"$work/tests.json"

echo "test: the broker-alarm test, alone (it blocks every publisher on the broker)" >&2
HOOKRELAY_TEST_BROKER_ALARM=1 gotestsum --jsonfile "$work/alarm.json" -- -race -count=1 -timeout 5m -run '^TestBrokerAlarm' ./internal/app/ || status=$?

# The console's page-time benchmark, once on a small database, so it
# cannot rot unnoticed (its real run fills a million events: docs/console.md).
echo "test: the console's page-time benchmark, once, on 2,000 events" >&2
HOOKRELAY_CONSOLE_BENCH_EVENTS=2000 go test -count=1 -run '^$' -bench '^BenchmarkConsolePages$' -benchtime 1x ./internal/console/ >"$work/bench.log" 2>&1 ||
	{ status=1; cat "$work/bench.log" >&2; }

# The Helm chart is a Go module of its own (the relay's go.mod does not carry
# Helm): its test renders the chart and runs the relay's binaries on the result.
echo "test: the Helm chart, deploy/kubernetes (its own module)" >&2
(cd deploy/kubernetes && go vet ./... && go test -count=1 ./...) || status=$?

# Counts over both runs: packages (of the main run) and tests passed,
# skipped and failed; a test that never ended (its package's binary died, a
# panic or the timeout) is counted apart, not as a failure of its own. Then
# the first test that failed, its output in full: whatever followed it (a
# package that died with it) is a consequence.
count() { # count FILE... JQ-SELECT
	local sel="${*: -1}"
	jq -s "map(select($sel)) | length" "${@:1:$#-1}"
}
if command -v jq >/dev/null 2>&1; then
	pkg='.Test == null and .Action ==' t='.Test != null and .Action =='
	m="$work/tests.json" a="$work/alarm.json"
	unfinished=$(jq -s '[group_by([.Package, .Test])[] | select(.[0].Test != null)
		| select((map(.Action) | index("run")) and ((map(.Action) | (index("pass") or index("fail") or index("skip"))) | not))] | length' "$m" "$a")
	echo "test: packages $(count "$m" "$pkg \"pass\"") passed, $(count "$m" "$pkg \"skip\"") without tests, $(count "$m" "$pkg \"fail\"") failed;" \
		"tests $(count "$m" "$a" "$t \"pass\"") passed, $(count "$m" "$a" "$t \"skip\"") skipped, $(count "$m" "$a" "$t \"fail\"") failed" \
		"($(count "$m" "$a" "$t \"fail\" and (.Test | contains(\"/\") | not)") top-level), $unfinished never ended (slowdown ${HOOKRELAY_TEST_SLOWDOWN}x)" >&2
	# Where the suite's time goes: its slowest top-level tests.
	echo "test: slowest: $(jq -rs 'map(select(.Test != null and (.Test | contains("/") | not) and .Action == "pass"))
		| sort_by(-.Elapsed) | .[:5] | map("\(.Test) \(.Elapsed)s") | join(", ")' "$m")" >&2
	first=$(jq -rs 'map(select(.Test != null and .Action == "fail")) | sort_by(.Time) | first
		| if . == null then empty else "\(.Package)\t\(.Test | split("/")[0])" end' "$m" "$a")
	if [[ -n "$first" ]]; then
		IFS=$'\t' read -r fpkg ftest <<<"$first"
		echo "test: the first test that failed: $ftest ($fpkg), its output in full:" >&2
		jq -rsj --arg p "$fpkg" --arg t "$ftest" 'map(select(.Package == $p and .Action == "output"
			and .Test != null and (.Test == $t or (.Test | startswith($t + "/"))))) | map(.Output) | join("")' "$m" "$a" >&2
	fi
fi
exit "$status"
