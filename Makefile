# hookrelay developer targets. `make help` lists them.
SHELL := /bin/bash
CONFIG ?= config.yaml
FUZZTIME ?= 20000x

.PHONY: help
help: ## list targets
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z0-9_\/-]+:.*##/ {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: services
services: ## start Postgres and RabbitMQ (installing them if absent)
	scripts/services.sh

.PHONY: build
build: ## build the binaries into bin/
	go build -buildvcs=auto -o bin/ ./cmd/...

.PHONY: run
run: ## services up, migrate, run receiver and dispatcher with $(CONFIG)
	scripts/run.sh $(CONFIG)

.PHONY: test
test: ## the whole suite with the race detector, against real services
	scripts/test.sh

.PHONY: test/short
test/short: ## unit tests only (no services)
	go test -short -count=1 ./...

.PHONY: chaos
chaos: ## the fault suite: a cluster and Postgres of its own, faults under load, a counted report
	scripts/chaos.sh

.PHONY: fuzz
fuzz: ## every fuzz target for $(FUZZTIME) (a count like 20000x, or a duration)
	scripts/fuzz.sh $(FUZZTIME)

.PHONY: bench
bench: build ## the relay benchmark against its bare references (BENCH_FLAGS=--quick: about a minute)
	bin/hookrelay bench $(BENCH_FLAGS)

.PHONY: profile
profile: ## bench --quick --profile on a scratch Postgres with pg_stat_statements (PROFILE_OUT=dir, BENCH_FLAGS)
	scripts/profile.sh $(BENCH_FLAGS)

.PHONY: bench/go
bench/go: ## Go micro-benchmarks (compare runs with benchstat)
	go test -run '^$$' -bench . -benchmem -count 5 ./...

.PHONY: migrate
migrate: build ## apply migrations to the configured database
	bin/hookrelay --config $(CONFIG) migrate

.PHONY: topology
topology: build ## regenerate topology/definitions.json from config.yaml
	bin/hookrelay --config config.yaml topology export --out topology/definitions.json

.PHONY: verify
verify: ## fail when formatting, vet or generated files are off
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	go vet ./...
	go test -count=1 -run 'TestDefinitionsFileIsCurrent' ./internal/app/

.PHONY: db/reset
db/reset: ## drop and recreate the hookrelay database, then migrate
	psql "$${HOOKRELAY_ADMIN_URL:-postgres://postgres:postgres@127.0.0.1:5432/postgres}" -c 'DROP DATABASE IF EXISTS hookrelay WITH (FORCE)' -c 'CREATE DATABASE hookrelay'
	$(MAKE) migrate
