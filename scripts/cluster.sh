#!/usr/bin/env bash
# A RabbitMQ cluster of its own on this machine, for failover and fault tests.
#
# Starts CLUSTER_NODES RabbitMQ nodes (default 3) from the installed package's
# binaries (/usr/lib/rabbitmq/bin: the /usr/sbin wrappers would switch user and
# cookie), each with its own node name, ports and data/log directories under one
# temporary folder, and joins them into one cluster (stop_app, join_cluster,
# start_app). It shares nothing with the system RabbitMQ on 5672 except epmd:
# not its ports, not its data, not its /var/lib/rabbitmq/.erlang.cookie (the
# nodes and the CLI run with HOME in our folder, holding our own cookie).
#
# Usage: scripts/cluster.sh COMMAND
#   up            start the nodes and form the cluster; waits until every node
#                 runs, is clustered and its management API answers. Already up:
#                 says so and exits 0. Stopped or killed nodes are started again.
#   down          kill every node (SIGKILL: its data goes anyway) and remove the
#                 folder
#   status        one line per node, and the cluster as a running node sees it;
#                 exits 1 unless every node runs and is clustered
#   kill N        kill -9 node N's Erlang VM (beam.smp), nothing else
#   stop N        stop node N gracefully (rabbitmqctl stop)
#   start N       start node N again on its data directory; waits until it rejoined
#   leader QUEUE  print "N NAME" of the node leading quorum queue QUEUE (vhost /)
#   ctl N ARGS    run rabbitmqctl ARGS against node N with this cluster's cookie,
#                 e.g. a memory alarm: ctl 1 set_vm_memory_high_watermark 0.000001
#                 (and back: ctl 1 set_vm_memory_high_watermark 0.4)
#   env           print shell assignments for the cluster: eval "$(scripts/cluster.sh env)"
#                   CLUSTER_AMQP_URLS        amqp URLs of all nodes, comma-separated
#                   CLUSTER_MANAGEMENT_URLS  management API base URLs, comma-separated
#                   CLUSTER_NODE_NAMES       Erlang node names, comma-separated
#                   CLUSTER_AMQP_URL_N, CLUSTER_MANAGEMENT_URL_N, CLUSTER_NODE_NAME_N
#                   CLUSTER_DIR, CLUSTER_NODES
# N is a node number, 1..CLUSTER_NODES.
#
# Environment (the same values must be given to every command of one cluster):
#   CLUSTER_NODES         node count, 1..9 (default 3; 1 is a standalone node)
#   CLUSTER_BASE_PORT     node N listens on AMQP BASE+N-1, management BASE+10000+N-1,
#                         Erlang distribution BASE+20000+N-1; the CLI tools use
#                         BASE+30000..BASE+30009 for their own distribution
#                         (default 5701: 5701.., 15701.., 25701.., 35701..35710)
#   CLUSTER_PREFIX        node N is PREFIX<N>@localhost (default hr: hr1@localhost)
#   CLUSTER_DIR           folder for cookie, config, data and logs
#                         (default ${TMPDIR:-/tmp}/hookrelay-cluster/PREFIX)
#   CLUSTER_WAIT_SECONDS  bound on every wait: boot, join, stop, restart (default 90)
# Two clusters run side by side when their CLUSTER_PREFIX and CLUSTER_BASE_PORT
# differ (ports at least 10 apart), e.g. a standalone node for memory alarms:
#   CLUSTER_NODES=1 CLUSTER_PREFIX=hralarm CLUSTER_BASE_PORT=5711 scripts/cluster.sh up
#
# Every node has the default user guest/guest (loopback only: every listener is on
# 127.0.0.1) and the rabbitmq_management plugin. Quorum queues get a member on every
# node: rabbit.quorum_cluster_size (RabbitMQ's default is 3) is set to CLUSTER_NODES.
# rabbit.dead_letter_worker_publisher_confirm_timeout is 5 s (default 2-3 minutes), as
# docs/production.md ("Running on a RabbitMQ cluster") recommends for the relay's retry tiers.
# Progress and errors go to stderr; stdout carries only what status, leader and env print.
# Needs bash, curl, jq, procps (pgrep) and the rabbitmq-server package (tried with
# Debian's 3.10.8).
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0; }
set -euo pipefail

RABBIT_BIN=/usr/lib/rabbitmq/bin
NODES="${CLUSTER_NODES:-3}"
BASE_PORT="${CLUSTER_BASE_PORT:-5701}"
PREFIX="${CLUSTER_PREFIX:-hr}"
DIR="${CLUSTER_DIR:-${TMPDIR:-/tmp}/hookrelay-cluster/${PREFIX}}"
WAIT_SECONDS="${CLUSTER_WAIT_SECONDS:-90}"
USER_PASS="guest:guest"
HOME_DIR="$DIR/home"
PARAMS="nodes=$NODES base_port=$BASE_PORT prefix=$PREFIX"

log() { printf 'cluster: %s\n' "$*" >&2; }
die() { printf 'cluster: ERROR: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------- settings

check_settings() {
	[[ "$NODES" =~ ^[1-9]$ ]] || die "CLUSTER_NODES must be 1..9, got '$NODES'"
	[[ "$BASE_PORT" =~ ^[0-9]+$ ]] && ((BASE_PORT >= 1024 && BASE_PORT + 30009 <= 65535)) ||
		die "CLUSTER_BASE_PORT must be 1024..35526, got '$BASE_PORT'"
	[[ "$PREFIX" =~ ^[a-z][a-z0-9_]*$ ]] || die "CLUSTER_PREFIX must match [a-z][a-z0-9_]*, got '$PREFIX'"
	[[ "$WAIT_SECONDS" =~ ^[1-9][0-9]*$ ]] || die "CLUSTER_WAIT_SECONDS must be a whole number of seconds, got '$WAIT_SECONDS'"
	[[ "$DIR" == /* ]] || die "CLUSTER_DIR must be an absolute path, got '$DIR'"
	local tool
	for tool in curl jq pgrep setsid timeout; do
		command -v "$tool" >/dev/null || die "$tool is needed: install it (apt-get install $tool)"
	done
	[[ -x "$RABBIT_BIN/rabbitmq-server" ]] || die "$RABBIT_BIN/rabbitmq-server not found: install rabbitmq-server"
	# A folder left by a cluster with other settings would be driven with the wrong ports.
	if [[ -f "$DIR/params" && "$(<"$DIR/params")" != "$PARAMS" ]]; then
		die "$DIR holds a cluster made with '$(<"$DIR/params")', not '$PARAMS': give the same CLUSTER_* settings"
	fi
}

node_name() { printf '%s%d@localhost' "$PREFIX" "$1"; }
amqp_port() { echo $((BASE_PORT + $1 - 1)); }
mgmt_port() { echo $((BASE_PORT + 10000 + $1 - 1)); }
dist_port() { echo $((BASE_PORT + 20000 + $1 - 1)); }
node_dir() { printf '%s/nodes/%d' "$DIR" "$1"; }
node_log() { printf '%s/log/%s.log' "$(node_dir "$1")" "$(node_name "$1")"; }
mgmt_url() { printf 'http://127.0.0.1:%d' "$(mgmt_port "$1")"; }

check_node_arg() {
	[[ "${1:-}" =~ ^[1-9]$ ]] && (($1 <= NODES)) || die "expected a node number 1..$NODES, got '${1:-}'"
}

# The environment every RabbitMQ tool runs with: our HOME (cookie) and our own
# rabbitmq-env.conf, so /etc/rabbitmq/rabbitmq-env.conf (NODENAME=rabbit@localhost)
# is not read, and CLI distribution ports apart from the system's 35672..35682.
common_env() {
	export HOME="$HOME_DIR"
	export RABBITMQ_CONF_ENV_FILE="$DIR/rabbitmq-env.conf"
	export RABBITMQ_CTL_DIST_PORT_MIN=$((BASE_PORT + 30000))
	export RABBITMQ_CTL_DIST_PORT_MAX=$((BASE_PORT + 30009))
	export ERL_EPMD_ADDRESS=127.0.0.1
	export LC_ALL=C.UTF-8
}

# rabbitmqctl against node N, bounded.
ctl() {
	local n=$1
	shift
	(common_env && timeout "$WAIT_SECONDS" "$RABBIT_BIN/rabbitmqctl" -q -n "$(node_name "$n")" "$@")
}

# ---------------------------------------------------------------- processes

# The pid of node N's Erlang VM, found by its environment (our HOME and its node
# name), so a stale pid file or another cluster's node can never be mistaken for it.
beam_pid() {
	local want_name want_home pid env
	want_name="RABBITMQ_NODENAME=$(node_name "$1")"
	want_home="HOME=$HOME_DIR"
	for pid in $(pgrep -x beam.smp || true); do
		env=$(tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ") || continue
		if grep -qxF "$want_name" <<<"$env" && grep -qxF "$want_home" <<<"$env"; then
			echo "$pid"
			return 0
		fi
	done
	return 1
}

# Every process whose environment has our HOME: the nodes' VMs and wrappers, and
# any CLI tool left over. Used by down to leave nothing behind.
our_pids() {
	local pid
	for pid in $(pgrep -f 'beam.smp|rabbitmq-server|erl_child_setup|inet_gethost' || true); do
		[[ $pid == "$$" ]] && continue
		tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ" | grep -qxF "HOME=$HOME_DIR" && echo "$pid"
	done
	return 0
}

# Wait up to $1 seconds until no process of ours is left.
wait_no_pids() {
	local deadline=$((SECONDS + $1))
	while [[ -n "$(our_pids)" ]]; do
		((SECONDS < deadline)) || return 1
		sleep 0.1
	done
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Before the first start: our ports and node names must be free.
preflight() {
	local n p names
	for ((n = 1; n <= NODES; n++)); do
		for p in "$(amqp_port "$n")" "$(mgmt_port "$n")" "$(dist_port "$n")"; do
			if port_open "$p"; then
				die "port $p (node $n) is in use: choose another CLUSTER_BASE_PORT"
			fi
		done
	done
	if names=$(epmd -names 2>/dev/null); then
		for ((n = 1; n <= NODES; n++)); do
			if grep -q "^name ${PREFIX}${n} at" <<<"$names"; then
				die "node name $(node_name "$n") is taken by another running node: choose another CLUSTER_PREFIX"
			fi
		done
	fi
}

write_node_config() {
	local n=$1 d
	d=$(node_dir "$n")
	mkdir -p "$d/mnesia" "$d/log"
	cat >"$d/rabbitmq.conf" <<-EOF
		listeners.tcp.1 = 127.0.0.1:$(amqp_port "$n")
		management.tcp.ip = 127.0.0.1
		management.tcp.port = $(mgmt_port "$n")
		log.console = false
		log.file.level = info
	EOF
	# RabbitMQ 3.10 has no rabbitmq.conf key for the quorum group size, nor
	# for the dead-letter worker's confirm timeout. That timeout is how long
	# a retry tier's at-least-once dead-lettering waits for the route
	# queue's confirm before it publishes again: after a leader change a
	# confirm can be lost, and with the default (2 to 3 minutes) the
	# tier's expired messages stay stranded that long. 5 s repairs it in
	# seconds; a copy published twice is dropped by the dispatcher.
	printf '[{rabbit, [{quorum_cluster_size, %d}, {dead_letter_worker_publisher_confirm_timeout, 5000}]}].\n' "$NODES" >"$d/advanced.config"
	echo '[rabbitmq_management].' >"$d/enabled_plugins"
}

# Launch node N in the background, in a session of its own so it outlives this
# script and a terminal's signals. Returns at once; see wait_node_up.
launch_node() {
	local n=$1 d
	d=$(node_dir "$n")
	(
		common_env
		export RABBITMQ_NODENAME="$(node_name "$n")"
		export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
		export RABBITMQ_NODE_PORT="$(amqp_port "$n")"
		export RABBITMQ_DIST_PORT="$(dist_port "$n")"
		export RABBITMQ_CONFIG_FILE="$d/rabbitmq.conf"
		export RABBITMQ_ADVANCED_CONFIG_FILE="$d/advanced.config"
		export RABBITMQ_ENABLED_PLUGINS_FILE="$d/enabled_plugins"
		export RABBITMQ_MNESIA_BASE="$d/mnesia"
		export RABBITMQ_LOG_BASE="$d/log"
		export RABBITMQ_PID_FILE="$d/pid"
		export RABBITMQ_PLUGINS_EXPAND_DIR="$d/plugins-expand"
		export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
		cd "$d"
		exec setsid "$RABBIT_BIN/rabbitmq-server" >>"$d/stdout.log" 2>&1 </dev/null
	) &
}

node_fail() {
	local n=$1 why=$2
	die "node $n ($(node_name "$n")) $why; log: $(node_log "$n") (and $(node_dir "$n")/stdout.log, ctl.log); 'scripts/cluster.sh down' cleans up"
}

mgmt_get() { curl -sf -m 5 -u "$USER_PASS" "$(mgmt_url "$1")$2"; }

# Wait until node N's VM runs and its management API answers.
wait_node_up() {
	local n=$1 deadline=$((SECONDS + WAIT_SECONDS)) started=$SECONDS
	until mgmt_get "$n" /api/overview >/dev/null 2>&1; do
		# The VM may take a moment to appear after launch; absent for 5 s is a failure.
		if ((SECONDS - started > 5)) && ! beam_pid "$n" >/dev/null; then
			node_fail "$n" "exited while starting"
		fi
		((SECONDS < deadline)) || node_fail "$n" "did not answer on $(mgmt_url "$n") within ${WAIT_SECONDS}s"
		sleep 0.2
	done
}

# Names of the cluster's nodes that node N sees running, one a line.
running_seen_by() {
	mgmt_get "$1" /api/nodes | jq -r '.[] | select(.running) | .name'
}

# Wait until node N sees every node of the cluster running.
wait_clustered() {
	local n=$1 deadline=$((SECONDS + WAIT_SECONDS)) want got i
	want=$(for ((i = 1; i <= NODES; i++)); do node_name "$i"; echo; done | sort)
	while :; do
		got=$(running_seen_by "$n" 2>/dev/null | sort) || got=""
		[[ "$got" == "$want" ]] && return 0
		((SECONDS < deadline)) || node_fail "$n" "does not see all $NODES nodes running within ${WAIT_SECONDS}s (sees: ${got//$'\n'/ })"
		sleep 0.2
	done
}

wait_node_gone() {
	local n=$1 deadline=$((SECONDS + WAIT_SECONDS))
	while beam_pid "$n" >/dev/null; do
		((SECONDS < deadline)) || node_fail "$n" "still runs ${WAIT_SECONDS}s after being told to stop"
		sleep 0.1
	done
}

# Wait until node N's members of quorum queues (vhost /) run again. Asked with
# rabbitmqctl, which checks them live: the management API's "online" comes from
# statistics and can lag by many seconds, either way.
wait_members_online() {
	local n=$1 deadline=$((SECONDS + WAIT_SECONDS)) queues lagging
	while :; do
		queues=$(ctl "$n" list_queues name type members online --formatter json 2>/dev/null) || queues=""
		if [[ -n "$queues" ]]; then
			lagging=$(jq -r --arg n "$(node_name "$n")" \
				'.[] | select(.type == "quorum" and (.members | index($n)) and ((.online | index($n)) | not)) | .name' <<<"$queues")
			[[ -z "$lagging" ]] && return 0
		fi
		((SECONDS < deadline)) || node_fail "$n" "has quorum queue members not online after ${WAIT_SECONDS}s: ${lagging:-list_queues failed}"
		sleep 0.5
	done
}

# A running node other than N (any running node when N is 0), or nothing.
other_running_node() {
	local i
	for ((i = 1; i <= NODES; i++)); do
		((i == $1)) && continue
		beam_pid "$i" >/dev/null && mgmt_get "$i" /api/overview >/dev/null 2>&1 && { echo "$i"; return 0; }
	done
	return 1
}

# ---------------------------------------------------------------- commands

cmd_up() {
	local n t0=$SECONDS missing=()
	if [[ -f "$DIR/formed" ]]; then
		for ((n = 1; n <= NODES; n++)); do
			beam_pid "$n" >/dev/null || missing+=("$n")
		done
		if ((${#missing[@]} == 0)); then
			wait_clustered 1
			log "already up: $NODES node(s) in $DIR"
			return 0
		fi
		log "starting stopped node(s) ${missing[*]}"
		for n in "${missing[@]}"; do launch_node "$n"; done
		for n in "${missing[@]}"; do wait_node_up "$n"; done
		for ((n = 1; n <= NODES; n++)); do wait_clustered "$n"; done
		for n in "${missing[@]}"; do wait_members_online "$n"; done
		log "up: $NODES node(s) in $DIR ($((SECONDS - t0))s)"
		return 0
	fi
	if [[ -d "$DIR" ]]; then
		log "$DIR holds an unfinished cluster: removing it first"
		cmd_down
	fi
	preflight

	mkdir -p "$HOME_DIR"
	echo "$PARAMS" >"$DIR/params"
	: >"$DIR/rabbitmq-env.conf"
	# 32 random hex digits; the Erlang cookie must be readable by its owner only.
	(umask 077 && od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >"$HOME_DIR/.erlang.cookie")
	chmod 400 "$HOME_DIR/.erlang.cookie"

	for ((n = 1; n <= NODES; n++)); do
		write_node_config "$n"
		launch_node "$n"
	done
	for ((n = 1; n <= NODES; n++)); do
		wait_node_up "$n"
	done
	log "$NODES node(s) booted ($((SECONDS - t0))s)"

	if ((NODES > 1)); then
		# stop_app in parallel; join one at a time (each join changes the cluster's
		# membership, so they are not run concurrently); start_app in parallel.
		# rabbitmqctl's own output (including harmless [error] lines about
		# connection tracking tables while a node restarts its app) goes to the
		# node's ctl.log, named when a step fails.
		local pids=()
		for ((n = 2; n <= NODES; n++)); do
			ctl "$n" stop_app >>"$(node_dir "$n")/ctl.log" 2>&1 & pids+=($!)
		done
		for ((n = 2; n <= NODES; n++)); do
			wait "${pids[n - 2]}" || node_fail "$n" "could not stop_app"
		done
		for ((n = 2; n <= NODES; n++)); do
			ctl "$n" join_cluster "$(node_name 1)" >>"$(node_dir "$n")/ctl.log" 2>&1 || node_fail "$n" "could not join_cluster $(node_name 1)"
		done
		pids=()
		for ((n = 2; n <= NODES; n++)); do
			ctl "$n" start_app >>"$(node_dir "$n")/ctl.log" 2>&1 & pids+=($!)
		done
		for ((n = 2; n <= NODES; n++)); do
			wait "${pids[n - 2]}" || node_fail "$n" "could not start_app after joining"
		done
	fi
	for ((n = 1; n <= NODES; n++)); do
		wait_node_up "$n"
		wait_clustered "$n"
	done
	touch "$DIR/formed"
	log "up: $NODES node(s) clustered in $DIR ($((SECONDS - t0))s); AMQP $(amqp_port 1).., management $(mgmt_port 1).."
}

# The folder and its data go, so nothing is gained by a graceful stop (about 7 s a
# node here): every process of ours gets SIGKILL, the VMs first so that their
# wrapper scripts, still alive, reap them and exit (no zombie left for init).
cmd_down() {
	local pids pid what="nothing was running" t0=$SECONDS
	pids=$(our_pids)
	if [[ -n "$pids" ]]; then
		what="nodes killed"
		for pid in $(pgrep -x beam.smp || true); do
			if grep -qxF "$pid" <<<"$pids"; then kill -KILL "$pid" 2>/dev/null || true; fi
		done
		wait_no_pids 5 || true
		pids=$(our_pids)
		# shellcheck disable=SC2086 # one pid a word
		[[ -z "$pids" ]] || kill -KILL $pids 2>/dev/null || true
		wait_no_pids 10 || die "processes $(our_pids | tr '\n' ' ')survive SIGKILL"
	fi
	if [[ -d "$DIR" ]]; then
		rm -rf "$DIR"
		# The default folder's parent goes too once the last cluster in it is down.
		[[ -n "${CLUSTER_DIR:-}" ]] || rmdir "$(dirname "$DIR")" 2>/dev/null || true
		log "down: $what, $DIR removed ($((SECONDS - t0))s)"
	else
		log "down: $what, no folder $DIR"
	fi
}

cmd_status() {
	[[ -d "$DIR" ]] || { echo "no cluster in $DIR"; return 1; }
	local n pid state ok=0 seer=""
	printf '%-4s %-24s %-8s %-6s %-6s %s\n' node name pid amqp mgmt state
	for ((n = 1; n <= NODES; n++)); do
		if pid=$(beam_pid "$n"); then
			if mgmt_get "$n" /api/overview >/dev/null 2>&1; then
				state=running
				[[ -n "$seer" ]] || seer=$n
			else
				state="VM up, broker not answering"
				ok=1
			fi
		else
			pid=- state=down ok=1
		fi
		printf '%-4s %-24s %-8s %-6s %-6s %s\n' "$n" "$(node_name "$n")" "$pid" \
			"$(amqp_port "$n")" "$(mgmt_port "$n")" "$state"
	done
	if [[ -z "$seer" ]]; then
		echo "no node answers"
		return 1
	fi
	local view
	view=$(mgmt_get "$seer" /api/nodes | jq -r '.[] | "  \(.name): \(if .running then "running" else "not running" end)\(if .mem_alarm then ", memory alarm" else "" end)\(if .disk_free_alarm then ", disk alarm" else "" end)"') ||
		die "reading /api/nodes from node $seer"
	echo "cluster as $(node_name "$seer") sees it:"
	echo "$view"
	((NODES == $(grep -c ': running' <<<"$view"))) || ok=1
	return "$ok"
}

cmd_kill() {
	check_node_arg "${1:-}"
	local n=$1 pid
	pid=$(beam_pid "$n") || die "node $n ($(node_name "$n")) is not running"
	kill -KILL "$pid"
	wait_node_gone "$n"
	log "killed node $n ($(node_name "$n")), beam.smp pid $pid"
}

cmd_stop() {
	check_node_arg "${1:-}"
	local n=$1 t0=$SECONDS
	beam_pid "$n" >/dev/null || die "node $n ($(node_name "$n")) is not running"
	ctl "$n" stop >/dev/null || node_fail "$n" "rabbitmqctl stop failed"
	wait_node_gone "$n"
	log "stopped node $n ($(node_name "$n")) ($((SECONDS - t0))s)"
}

cmd_start() {
	check_node_arg "${1:-}"
	local n=$1 t0=$SECONDS seer
	[[ -f "$DIR/formed" ]] || die "no cluster in $DIR: run 'scripts/cluster.sh up' first"
	if beam_pid "$n" >/dev/null; then
		log "node $n ($(node_name "$n")) is already running"
		return 0
	fi
	launch_node "$n"
	wait_node_up "$n"
	wait_clustered "$n"
	# Rejoined means the others see it too, not only that it sees them.
	if seer=$(other_running_node "$n"); then
		wait_clustered "$seer"
	fi
	wait_members_online "$n"
	log "started node $n ($(node_name "$n")), rejoined ($((SECONDS - t0))s)"
}

# The management API's "leader" is empty, or may still name the dead node, for a
# moment after the leader's node died: wait (bounded) for a leader that is online
# and whose VM runs.
cmd_leader() {
	local q=${1:-} n body code leader deadline=$((SECONDS + WAIT_SECONDS))
	[[ -n "$q" ]] || die "usage: scripts/cluster.sh leader QUEUE"
	while :; do
		n=$(other_running_node 0) || die "no node of $DIR answers"
		body=$(curl -s -m 5 -u "$USER_PASS" -w '\n%{http_code}' \
			"$(mgmt_url "$n")/api/queues/%2F/$(jq -rn --arg q "$q" '$q|@uri')") ||
			die "asking node $n for queue $q"
		code=${body##*$'\n'} body=${body%$'\n'*}
		[[ "$code" == 200 ]] || die "queue $q: management API of node $n answered $code: $body"
		[[ "$(jq -r .type <<<"$body")" == quorum ]] || die "queue $q is not a quorum queue"
		leader=$(jq -r 'select(.leader as $l | .online | index($l)) | .leader' <<<"$body")
		if [[ -n "$leader" ]]; then
			for ((n = 1; n <= NODES; n++)); do
				if [[ "$(node_name "$n")" == "$leader" ]] && beam_pid "$n" >/dev/null; then
					echo "$n $leader"
					return 0
				fi
			done
		fi
		((SECONDS < deadline)) || die "queue $q has no leader on a running node of this cluster after ${WAIT_SECONDS}s (last seen: ${leader:-none})"
		sleep 0.2
	done
}

cmd_env() {
	local n amqp=() mgmt=() names=()
	for ((n = 1; n <= NODES; n++)); do
		amqp+=("amqp://$USER_PASS@127.0.0.1:$(amqp_port "$n")/")
		mgmt+=("$(mgmt_url "$n")")
		names+=("$(node_name "$n")")
		printf "export CLUSTER_AMQP_URL_%d='%s'\n" "$n" "${amqp[n - 1]}"
		printf "export CLUSTER_MANAGEMENT_URL_%d='%s'\n" "$n" "${mgmt[n - 1]}"
		printf "export CLUSTER_NODE_NAME_%d='%s'\n" "$n" "${names[n - 1]}"
	done
	local IFS=,
	printf "export CLUSTER_AMQP_URLS='%s'\n" "${amqp[*]}"
	printf "export CLUSTER_MANAGEMENT_URLS='%s'\n" "${mgmt[*]}"
	printf "export CLUSTER_NODE_NAMES='%s'\n" "${names[*]}"
	printf "export CLUSTER_DIR='%s'\n" "$DIR"
	printf "export CLUSTER_NODES='%s'\n" "$NODES"
}

main() {
	local cmd=${1:-}
	shift || true
	check_settings
	case "$cmd" in
	up) cmd_up ;;
	down) cmd_down ;;
	status) cmd_status ;;
	kill) cmd_kill "$@" ;;
	stop) cmd_stop "$@" ;;
	start) cmd_start "$@" ;;
	leader) cmd_leader "$@" ;;
	ctl)
		check_node_arg "${1:-}"
		ctl "$@"
		;;
	env) cmd_env ;;
	*) die "usage: scripts/cluster.sh up|down|status|kill N|stop N|start N|leader QUEUE|ctl N ARGS|env (see the header of $0)" ;;
	esac
}

main "$@"
