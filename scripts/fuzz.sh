#!/usr/bin/env bash
# Run every fuzz target for an execution budget.
#
#   scripts/fuzz.sh [BUDGET]
#
# BUDGET is a count of executions per target ("20000x", the default) or a
# duration ("30s") for a longer local run. CI uses counts: Go 1.26's fuzz
# coordinator can fail a duration run with a bare "context deadline
# exceeded" when the machine is busy (golang/go#75804, fixed in Go 1.27),
# and a count has no deadline to race. A real finding still fails the run
# and writes its input under the package's testdata/fuzz/.
#
# Targets whose inputs are cheap to build get a larger share of a count
# budget (see scale below); a duration is used as given.
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0; }
set -euo pipefail
cd "$(dirname "$0")/.."
budget="${1:-20000x}"

# scale TARGET: the multiplier of a count budget for TARGET. The extractor
# parses JSON and is the one every request goes through: it gets more.
scale() {
	case "$1" in
	FuzzExtract) echo 3 ;;
	*) echo 1 ;;
	esac
}

for pkg in $(go list ./...); do
	dir=$(go list -f '{{.Dir}}' "$pkg")
	for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //'); do
		t="$budget"
		if [[ "$budget" =~ ^([0-9]+)x$ ]]; then
			t="$((BASH_REMATCH[1] * $(scale "$target")))x"
		fi
		echo "fuzz: $pkg $target for $t"
		go test -run '^$' -fuzz "^${target}\$" -fuzztime "$t" "$pkg"
	done
done
