#!/usr/bin/env bash
# Make sure the local services hookrelay needs are installed, running and set up:
#   - PostgreSQL, reachable with HOOKRELAY_DATABASE_MIGRATE_URL, and its database created;
#   - RabbitMQ, with the management, shovel and shovel_management plugins enabled.
#
# Used by scripts/run.sh, scripts/test.sh and CI (.ci/run). Idempotent: a second run
# changes nothing. Progress goes to stderr; stdout stays empty.
#
# It may change this machine, and says so on a "services: CHANGE:" line before each
# change, then lists them at the end (README, "What the scripts change"):
#   - apt-get install postgresql, rabbitmq-server, postgresql-client, curl, jq (as root),
#     and chromium with --browser;
#   - create a PostgreSQL cluster, start PostgreSQL or RabbitMQ;
#   - enable RabbitMQ plugins: management (hookrelay reads queue and tier stats through
#     it) and shovel + shovel_management (the management UI's "Move messages");
#   - create the URL's PostgreSQL role and set its password to the URL's, through the
#     local socket, when a password login fails (a fresh Debian PostgreSQL); create the
#     URL's database.
#
#   scripts/services.sh --check   say the first change it would make and exit 3, changing
#                                 nothing; exit 0 when there is none
#   scripts/services.sh --browser also install Debian's chromium (the tests drive the
#                                 web console in it)
#
# Environment:
#   HOOKRELAY_DATABASE_MIGRATE_URL  postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?sslmode=...]:
#                           the role that owns the tables (config.yaml's database.migrate_url;
#                           default postgres://postgres:postgres@127.0.0.1:5432/hookrelay?sslmode=disable);
#                           HOOKRELAY_DATABASE_URL when only that is set. hookrelay migrate
#                           creates the processes' role (database.url) itself.
#   HOOKRELAY_AMQP_URL      amqp://USER:PASS@HOST[:PORT]/ (default amqp://guest:guest@127.0.0.1:5672/)
#   SERVICES_WAIT_SECONDS   how long to wait for each service to come up (default 90)
#
# Local servers (host 127.0.0.1, localhost or ::1) are installed and started when needed;
# for a remote host the script only waits for it and prepares the database.
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0; }
set -euo pipefail

PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
export PATH

# The variable the URL came from, for messages.
DB_URL_VAR=HOOKRELAY_DATABASE_MIGRATE_URL
if [[ -z "${HOOKRELAY_DATABASE_MIGRATE_URL:-}" && -n "${HOOKRELAY_DATABASE_URL:-}" ]]; then
	DB_URL_VAR=HOOKRELAY_DATABASE_URL
fi
DB_URL="${HOOKRELAY_DATABASE_MIGRATE_URL:-${HOOKRELAY_DATABASE_URL:-postgres://postgres:postgres@127.0.0.1:5432/hookrelay?sslmode=disable}}"
AMQP_URL="${HOOKRELAY_AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/}"
WAIT_SECONDS="${SERVICES_WAIT_SECONDS:-90}"
RABBIT_MGMT_URL="http://127.0.0.1:15672/api/overview"
RABBIT_MGMT_CREDS="guest:guest"
RABBIT_PLUGINS=(rabbitmq_management rabbitmq_shovel rabbitmq_shovel_management)

log() { printf 'services: %s\n' "$*" >&2; }
die() { printf 'services: ERROR: %s\n' "$*" >&2; exit 1; }

CHECK=0
BROWSER=0
for arg in "$@"; do
	case "$arg" in
	--check) CHECK=1 ;;
	--browser) BROWSER=1 ;;
	*) die "unknown argument '$arg' (--check, --browser, --help)" ;;
	esac
done
CHANGES=()
# change WHAT: say a change to this machine before making it. With --check, say it
# would be made and stop, changing nothing.
change() {
	if [[ $CHECK -eq 1 ]]; then
		printf 'services: would change: %s\n' "$*" >&2
		printf 'services: stopped at the first change (--check changes nothing)\n' >&2
		exit 3
	fi
	CHANGES+=("$*")
	printf 'services: CHANGE: %s\n' "$*" >&2
}

# ---------------------------------------------------------------- privileges

as_root() {
	if [[ ${EUID} -eq 0 ]]; then
		"$@"
	elif command -v sudo >/dev/null 2>&1; then
		sudo -- "$@"
	else
		die "'$1' needs root: run this script as root or install sudo"
	fi
}

as_postgres() {
	if [[ ${EUID} -eq 0 ]]; then
		(cd / && runuser -u postgres -- "$@")
	elif [[ "$(id -un)" == postgres ]]; then
		"$@"
	elif command -v sudo >/dev/null 2>&1; then
		(cd / && sudo -u postgres -- "$@")
	else
		die "'$1' must run as the postgres OS user: run this script as root or install sudo"
	fi
}

# ---------------------------------------------------------------- URL parsing

# urldecode STRING: decode %XX escapes (a '+' stays a '+', as in URL user info).
urldecode() {
	local s="${1//\\/\\\\}"
	printf '%b' "${s//%/\\x}"
}

# parse_url URL: sets U_SCHEME U_USER U_PASS U_HOST U_PORT U_PATH U_QUERY.
parse_url() {
	local url="$1" rest authority userinfo hostport
	U_SCHEME="" U_USER="" U_PASS="" U_HOST="" U_PORT="" U_PATH="" U_QUERY=""
	[[ "$url" == *://* ]] || return 1
	U_SCHEME="${url%%://*}"
	rest="${url#*://}"
	rest="${rest%%#*}"
	if [[ "$rest" == *\?* ]]; then
		U_QUERY="${rest#*\?}"
		rest="${rest%%\?*}"
	fi
	authority="${rest%%/*}"
	if [[ "$rest" == */* ]]; then
		U_PATH="${rest#*/}"
	fi
	if [[ "$authority" == *@* ]]; then
		userinfo="${authority%@*}"
		hostport="${authority##*@}"
		if [[ "$userinfo" == *:* ]]; then
			U_USER="$(urldecode "${userinfo%%:*}")"
			U_PASS="$(urldecode "${userinfo#*:}")"
		else
			U_USER="$(urldecode "$userinfo")"
		fi
	else
		hostport="$authority"
	fi
	if [[ "$hostport" == \[* ]]; then # [IPv6]:port
		U_HOST="${hostport#\[}"
		U_HOST="${U_HOST%%\]*}"
		hostport="${hostport#*\]}"
		U_PORT="${hostport#:}"
	else
		U_HOST="${hostport%%:*}"
		if [[ "$hostport" == *:* ]]; then
			U_PORT="${hostport#*:}"
		fi
	fi
	U_HOST="$(urldecode "$U_HOST")"
	U_PATH="$(urldecode "$U_PATH")"
}

# query_param QUERY NAME: print the value of NAME in a URL query string.
query_param() {
	local pair
	local -a pairs
	IFS='&' read -r -a pairs <<<"$1"
	for pair in "${pairs[@]}"; do
		if [[ "${pair%%=*}" == "$2" ]]; then
			urldecode "${pair#*=}"
			return 0
		fi
	done
	return 0
}

is_local_host() {
	case "$1" in
	"" | 127.0.0.1 | localhost | ::1) return 0 ;;
	*) return 1 ;;
	esac
}

parse_url "$DB_URL" || die "$DB_URL_VAR is not a URL (expected postgres://user:password@host:port/db)"
case "$U_SCHEME" in
postgres | postgresql) ;;
*) die "$DB_URL_VAR must start with postgres:// or postgresql:// (got '${U_SCHEME}://')" ;;
esac
[[ "$U_HOST" != *,* ]] || die "$DB_URL_VAR: several hosts are not supported by this script"
DB_USER="${U_USER:-postgres}"
DB_PASS="$U_PASS"
DB_HOST="${U_HOST:-127.0.0.1}"
DB_PORT="${U_PORT:-5432}"
DB_NAME="${U_PATH%%/*}"
DB_NAME="${DB_NAME:-$DB_USER}"
DB_SSLMODE="$(query_param "$U_QUERY" sslmode)"
DB_SSLMODE="${DB_SSLMODE:-prefer}"
[[ "$DB_PORT" =~ ^[0-9]+$ ]] || die "$DB_URL_VAR: bad port '$DB_PORT'"
PG_LOCAL=0
if is_local_host "$DB_HOST"; then PG_LOCAL=1; fi

parse_url "$AMQP_URL" || die "HOOKRELAY_AMQP_URL is not a URL (expected amqp://user:password@host:port/)"
RABBIT_HOST="${U_HOST:-127.0.0.1}"
RABBIT_LOCAL=0
if is_local_host "$RABBIT_HOST"; then RABBIT_LOCAL=1; fi

# ---------------------------------------------------------------- 1. install

APT_UPDATED=0
apt_install() {
	command -v apt-get >/dev/null 2>&1 || die "missing packages ($*) and no apt-get to install them: install them by hand"
	change "install Debian packages: $* (apt-get update and install, as root)"
	if [[ $APT_UPDATED -eq 0 ]]; then
		log "apt-get update"
		as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 || die "apt-get update failed"
		APT_UPDATED=1
	fi
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >&2 || die "apt-get install $* failed"
}

pg_server_installed() {
	command -v pg_ctlcluster >/dev/null 2>&1 && compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null
}
pg_cluster_exists() {
	compgen -G '/etc/postgresql/*/*/postgresql.conf' >/dev/null
}

missing=()
if [[ $PG_LOCAL -eq 1 ]] && ! pg_server_installed; then
	missing+=(postgresql)
fi
if [[ $RABBIT_LOCAL -eq 1 ]] && ! command -v rabbitmq-server >/dev/null 2>&1; then
	missing+=(rabbitmq-server)
fi
if ! command -v psql >/dev/null 2>&1 || ! command -v pg_isready >/dev/null 2>&1; then
	missing+=(postgresql-client)
fi
# curl reads the local management API; curl and jq run the admin API's
# examples (docs/api.md), which the tests run too.
if ! command -v curl >/dev/null 2>&1; then
	missing+=(curl)
fi
if ! command -v jq >/dev/null 2>&1; then
	missing+=(jq)
fi
# --browser (the tests): a real browser drives the web console.
if [[ $BROWSER -eq 1 ]] && ! command -v chromium >/dev/null 2>&1; then
	missing+=(chromium)
fi
if [[ ${#missing[@]} -gt 0 ]]; then
	apt_install "${missing[@]}"
fi

# A server without any cluster (e.g. it was dropped): create one on the wanted port.
if [[ $PG_LOCAL -eq 1 ]] && ! pg_cluster_exists; then
	pg_version="$(find /usr/lib/postgresql -mindepth 1 -maxdepth 1 -printf '%f\n' | sort -V | tail -n 1)"
	[[ -n "$pg_version" ]] || die "PostgreSQL server binaries not found under /usr/lib/postgresql"
	change "create PostgreSQL cluster $pg_version/main on port $DB_PORT (pg_createcluster, as root)"
	as_root pg_createcluster --port "$DB_PORT" "$pg_version" main >&2 || die "pg_createcluster $pg_version main failed"
fi

# ---------------------------------------------------------------- 2. PostgreSQL

pg_ready() { pg_isready -q -h "$DB_HOST" -p "$DB_PORT" -t 3 >/dev/null 2>&1; }

if ! pg_ready; then
	if [[ $PG_LOCAL -eq 1 ]]; then
		started=0
		while read -r ver name port status _; do
			[[ "$port" == "$DB_PORT" ]] || continue
			if [[ "$status" == down* ]]; then
				change "start PostgreSQL cluster $ver/$name on port $port (pg_ctlcluster, as root)"
				as_root pg_ctlcluster --skip-systemctl-redirect "$ver" "$name" start >&2 ||
					log "pg_ctlcluster $ver $name start failed (see /var/log/postgresql/postgresql-$ver-$name.log)"
			fi
			started=1
		done < <(pg_lsclusters -h 2>/dev/null || true)
		[[ $started -eq 1 ]] || die "no PostgreSQL cluster is configured on port $DB_PORT (see pg_lsclusters)"
	fi
	log "waiting for PostgreSQL on $DB_HOST:$DB_PORT (up to ${WAIT_SECONDS}s)"
	deadline=$((SECONDS + WAIT_SECONDS))
	until pg_ready; do
		((SECONDS < deadline)) || die "PostgreSQL on $DB_HOST:$DB_PORT is not ready after ${WAIT_SECONDS}s"
		sleep 1
	done
fi
log "postgres is up on $DB_HOST:$DB_PORT"

# ---------------------------------------------------------------- 3. RabbitMQ

rabbit_running() { as_root timeout 30 rabbitmq-diagnostics -q check_running >/dev/null 2>&1; }
rabbit_node_up() { as_root timeout 30 rabbitmq-diagnostics -q ping >/dev/null 2>&1; }
mgmt_ready() { curl -fsS -o /dev/null --max-time 5 -u "$RABBIT_MGMT_CREDS" "$RABBIT_MGMT_URL" >/dev/null 2>&1; }

if [[ $RABBIT_LOCAL -eq 1 ]]; then
	# RabbitMQ's CLI tools only run as root or rabbitmq; check here, as the probes
	# below hide their own errors.
	if [[ ${EUID} -ne 0 ]] && ! command -v sudo >/dev/null 2>&1; then
		die "checking the local RabbitMQ needs root (rabbitmq-diagnostics): run this script as root or install sudo"
	fi
	if ! rabbit_running; then
		if rabbit_node_up; then
			change "start the stopped RabbitMQ application of the running node (rabbitmqctl start_app, as root)"
			as_root timeout 60 rabbitmqctl -q start_app >&2 || true
		else
			change "start RabbitMQ (rabbitmq-server -detached, as root)"
			as_root rabbitmq-server -detached >&2 || die "rabbitmq-server -detached failed"
		fi
		log "waiting for RabbitMQ to boot (up to ${WAIT_SECONDS}s)"
		deadline=$((SECONDS + WAIT_SECONDS))
		# await_startup fails at once while the node cannot be reached yet: poll it.
		until as_root timeout 30 rabbitmqctl -q await_startup >/dev/null 2>&1; do
			((SECONDS < deadline)) || die "RabbitMQ did not start within ${WAIT_SECONDS}s (see /var/log/rabbitmq/)"
			sleep 2
		done
	fi
	log "rabbitmq is up"

	enabled="$(as_root timeout 60 rabbitmq-plugins -q list -e -m 2>/dev/null)" ||
		die "rabbitmq-plugins list failed"
	to_enable=()
	for plugin in "${RABBIT_PLUGINS[@]}"; do
		if ! grep -qxF "$plugin" <<<"$enabled"; then to_enable+=("$plugin"); fi
	done
	if [[ ${#to_enable[@]} -gt 0 ]]; then
		change "enable RabbitMQ plugins ${to_enable[*]} on the local node (rabbitmq-plugins, as root; rabbitmq-plugins disable undoes it)"
		as_root timeout 120 rabbitmq-plugins -q enable "${to_enable[@]}" >/dev/null ||
			die "rabbitmq-plugins enable ${to_enable[*]} failed"
	fi

	if ! mgmt_ready; then
		log "waiting for the RabbitMQ management API on 127.0.0.1:15672 (up to ${WAIT_SECONDS}s)"
		deadline=$((SECONDS + WAIT_SECONDS))
		until mgmt_ready; do
			((SECONDS < deadline)) || die "RabbitMQ management API ($RABBIT_MGMT_URL) did not answer within ${WAIT_SECONDS}s"
			sleep 1
		done
	fi
	log "rabbitmq management API is up on 127.0.0.1:15672"
else
	log "HOOKRELAY_AMQP_URL points to $RABBIT_HOST: not managing a local RabbitMQ"
fi

# ---------------------------------------------------------------- 4. credentials

# psql against the `postgres` database with the URL's credentials. The password goes
# through the environment, never on a command line.
pg_admin() {
	PGPASSWORD="$DB_PASS" PGCONNECT_TIMEOUT=10 PGSSLMODE="$DB_SSLMODE" \
		psql -X -w -v ON_ERROR_STOP=1 -h "$DB_HOST" -p "$DB_PORT" -U "$DB_USER" -d postgres "$@"
}

admin_err=""
admin_check() {
	admin_err="$(pg_admin -Atc 'select 1' 2>&1 >/dev/null)"
}

if ! admin_check; then
	if [[ $PG_LOCAL -eq 1 ]] && grep -qiE 'password|authentication failed' <<<"$admin_err"; then
		if [[ -z "$DB_PASS" ]]; then
			die "cannot log in to PostgreSQL as '$DB_USER' and $DB_URL_VAR has no password: ${admin_err}"
		fi
		log "password login as '$DB_USER' failed: ${admin_err}"
		change "set the password of PostgreSQL role '$DB_USER' to $DB_URL_VAR's, creating the role if missing (ALTER ROLE through the local socket, as the postgres OS user)"
		# SQL string literal of the password: double the single quotes (standard_conforming_strings
		# is set on, so backslashes are literal). Fed on stdin, so it is in no process' argv;
		# VERBOSITY terse keeps any error message from quoting the statement.
		pw_literal="'${DB_PASS//\'/\'\'}'"
		if ! printf '%s\n' \
			'\set VERBOSITY terse' \
			'SET standard_conforming_strings = on;' \
			"SELECT format('CREATE ROLE %I LOGIN CREATEDB', :'role') WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'role') \\gexec" \
			"SELECT format('ALTER ROLE %I WITH LOGIN PASSWORD %L', :'role', ${pw_literal}) \\gexec" |
			as_postgres psql -X -q -v ON_ERROR_STOP=1 -p "$DB_PORT" -d postgres -v role="$DB_USER" >/dev/null; then
			die "could not set the password of role '$DB_USER' through the local socket"
		fi
		unset pw_literal
		admin_check || die "still cannot log in to PostgreSQL as '$DB_USER' after setting its password: ${admin_err}"
	else
		die "cannot connect to PostgreSQL as '$DB_USER' on $DB_HOST:$DB_PORT: ${admin_err}"
	fi
fi

# ---------------------------------------------------------------- 5. database

db_exists() {
	[[ "$(pg_admin -At -v db="$DB_NAME" <<<"SELECT 1 FROM pg_database WHERE datname = :'db'")" == 1 ]]
}

if db_exists; then
	log "database '$DB_NAME' exists"
else
	change "create database '$DB_NAME' on $DB_HOST:$DB_PORT"
	if ! pg_admin -q -v db="$DB_NAME" <<<"SELECT format('CREATE DATABASE %I', :'db') \\gexec" >/dev/null; then
		db_exists || die "could not create database '$DB_NAME'"
	fi
fi

log "postgres and rabbitmq ready"
if [[ ${#CHANGES[@]} -eq 0 ]]; then
	log "changed nothing on this machine"
else
	log "made ${#CHANGES[@]} change(s) on this machine:"
	for c in "${CHANGES[@]}"; do log "  - $c"; done
fi
