#!/usr/bin/env bash
# Profiles the relay under the benchmark: builds bin/, starts a scratch
# Postgres of its own (cmd/chaos's, `bin/chaos postgres`: initdb in a
# temporary folder, on port PROFILE_PG_PORT, default 25442) that loads
# pg_stat_statements and has the settings docs/performance.md
# assumes, runs
#
#   bin/hookrelay bench --quick --profile OUT --database-url <scratch> [your bench flags]
#
# against it and RabbitMQ on 5672, stops it, and prints where OUT is. OUT
# then holds, for the ingest phase with the dispatcher running, the
# delivery drain and the end-to-end phase:
#   <phase>-receiver.pprof, <phase>-dispatcher.pprof   CPU profiles (go tool pprof -http=: FILE)
#   <phase>-{receiver,dispatcher}.top.txt              go tool pprof -top -nodecount=25 (.cum.txt: with -cum)
#   <phase>-pg_stat_statements.txt                      top 15 statements by total_exec_time
#   bench.txt                                           the bench's table (its stdout)
#
#   scripts/profile.sh                           # OUT = PROFILE_OUT or a new /tmp/hookrelay-profile-* folder
#   PROFILE_OUT=/work/notes/profiles/after scripts/profile.sh --clients 16
#   make profile                                 # the same, BENCH_FLAGS for the bench
#
# Before/after: the same run against the binaries of an older commit. The
# bench, the bare references and the schema come from this tree (the
# migrations only add columns and tables, so older binaries run on it); only
# the receiver and the dispatcher are the old ones. Binaries older than
# debug.pprof refuse that key, so --compat-old writes a config without it
# (and without the admin listener): those runs have pg_stat_statements but
# no CPU profiles.
#
#   git worktree add /tmp/old 71697bb
#   (cd /tmp/old && go build -o bin/ ./cmd/receiver ./cmd/dispatcher)
#   PROFILE_OUT=/work/notes/profiles/before scripts/profile.sh \
#       --receiver-bin /tmp/old/bin/receiver --dispatcher-bin /tmp/old/bin/dispatcher --compat-old
#   git worktree remove /tmp/old
#
# For CPU profiles of the old code too, give the old tree debug.pprof before
# building it, and leave --compat-old out (done this way for 71697bb):
#
#   git -C /tmp/old cherry-pick --no-commit "$(git log --diff-filter=A --format=%h -- internal/app/pprof.go)"
#       # with 71697bb, internal/app/dispatcher.go conflicts on one line: keep
#       # the new `status` lines and drop `controls: controls` (the old
#       # dispatcher has no route controls)
#   (cd /tmp/old && go build -o bin/ ./cmd/receiver ./cmd/dispatcher)
#   PROFILE_OUT=/work/notes/profiles/before scripts/profile.sh \
#       --receiver-bin /tmp/old/bin/receiver --dispatcher-bin /tmp/old/bin/dispatcher
#
# Environment: PROFILE_OUT (the output folder), PROFILE_PG_PORT (25442),
# PROFILE_SHARED_BUFFERS (default a quarter of RAM, at most 8GB),
# PROFILE_KEEP_PG=1 keeps the scratch Postgres's folder (its log).
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0; }
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'profile: %s\n' "$*" >&2; }

scripts/services.sh # RabbitMQ up (and Postgres's binaries installed)

out="${PROFILE_OUT:-$(mktemp -d -t hookrelay-profile-XXXXXX)}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
port="${PROFILE_PG_PORT:-25442}"
if [[ -z "${PROFILE_SHARED_BUFFERS:-}" ]]; then
	mem_mb=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)
	sb=$((mem_mb / 4))
	((sb > 8192)) && sb=8192
	PROFILE_SHARED_BUFFERS="${sb}MB"
fi

log "building bin/"
go build -buildvcs=auto -o bin/ ./cmd/...

work=$(mktemp -d -t hookrelay-profile-pg-XXXXXX)
chmod 755 "$work" # Postgres runs as the postgres user below it when we are root
pgpid=""
status=1
cleanup() {
	if [[ -n "$pgpid" ]]; then
		kill -TERM "$pgpid" 2>/dev/null || true
		wait "$pgpid" 2>/dev/null || true
	fi
	if [[ $status -eq 0 && -z "${PROFILE_KEEP_PG:-}" ]]; then
		rm -rf "$work"
	else
		log "scratch Postgres folder kept in $work (postgres.log)"
	fi
}
trap cleanup EXIT

# docs/performance.md, "Postgres settings it assumes", plus pg_stat_statements.
settings=(
	shared_preload_libraries=pg_stat_statements
	pg_stat_statements.track=top
	synchronous_commit=on
	fsync=on
	checkpoint_timeout=15min
	max_wal_size=4GB
	checkpoint_completion_target=0.9
	wal_compression=on
	"shared_buffers=$PROFILE_SHARED_BUFFERS"
	max_connections=200
)
args=(postgres --work "$work/pg" --pg-port "$port")
for s in "${settings[@]}"; do args+=(--setting "$s"); done
log "starting a scratch Postgres on 127.0.0.1:$port (shared_buffers $PROFILE_SHARED_BUFFERS, pg_stat_statements)"
bin/chaos "${args[@]}" >"$work/ready" 2>"$work/chaos.err" &
pgpid=$!

# Wait for its "ready <url>" line (or its exit), at most 90s.
url=""
for _ in $(seq 1 900); do
	if read -r word url <"$work/ready" 2>/dev/null && [[ "$word" == ready ]]; then
		break
	fi
	url=""
	if ! kill -0 "$pgpid" 2>/dev/null; then
		pgpid=""
		log "the scratch Postgres did not start:"
		cat "$work/chaos.err" >&2
		exit 1
	fi
	sleep 0.1 # polling a file another process writes
done
[[ -n "$url" ]] || { log "the scratch Postgres was not ready within 90s"; cat "$work/chaos.err" >&2; exit 1; }

log "bin/hookrelay bench --quick --profile $out $*"
set +e
bin/hookrelay bench --quick --profile "$out" --database-url "$url" "$@" | tee "$out/bench.txt"
status=${PIPESTATUS[0]}
set -e
log "profiles in $out"
exit $status
