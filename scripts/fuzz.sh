#!/usr/bin/env bash
# Run every fuzz target for a while (default 5s each).
#
#   scripts/fuzz.sh [DURATION]
set -euo pipefail
cd "$(dirname "$0")/.."
time="${1:-5s}"
for pkg in $(go list ./...); do
	dir=$(go list -f '{{.Dir}}' "$pkg")
	for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //'); do
		echo "fuzz: $pkg $target for $time"
		go test -run '^$' -fuzz "^${target}\$" -fuzztime "$time" "$pkg"
	done
done
