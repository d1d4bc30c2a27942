# OncePay gateway. `make run` starts it on :8080 (SQLite + simulator when no
# DATABASE_URL); `make test` runs vet and the race-enabled tests against the
# PostgreSQL of TEST_DATABASE_URL.
GO       ?= go
SWAG     ?= $(shell $(GO) env GOPATH)/bin/swag
SWAG_VERSION := v1.16.6
OAPI_CODEGEN := github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@v2.8.2
export TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/test?sslmode=disable

.PHONY: run build test docs docs-check lint bench chaos model migrate fmt tools api-lint api-check

# The binary, not `go run`: on Ctrl-C go run exits 1 whatever the gateway
# did, and make reported a clean shutdown as an error.
run: build
	exec ./bin/gateway

build:
	$(GO) build -o bin/gateway .

migrate:
	$(GO) run . migrate

test:
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 12m ./...

$(SWAG):
	$(GO) install github.com/swaggo/swag/cmd/swag@$(SWAG_VERSION)

tools: $(SWAG)

# docs/ is generated from the swag annotations (main.go and the handlers)
# and committed: swagger.json (Swagger 2.0, swag's output) and openapi.json
# (OpenAPI 3, the published description: docs/oas3gen converts it), and the
# Go client oapi-codegen generates from it for docs/apicheck's tests. The
# swag and oapi-codegen versions are pinned: another version writes other
# bytes, which would make docs-check flap between machines.
docs: $(SWAG)
	@$(GO) version -m $(SWAG) | grep -Eq '^[[:space:]]+mod[[:space:]]+github.com/swaggo/swag[[:space:]]+$(SWAG_VERSION)[[:space:]]' || \
		{ echo "docs: $(SWAG) is not swag $(SWAG_VERSION); run: $(GO) install github.com/swaggo/swag/cmd/swag@$(SWAG_VERSION)"; exit 1; }
	$(SWAG) init --quiet --generalInfo main.go --output docs --parseInternal --requiredByDefault --outputTypes go,json,yaml
	gofmt -w docs/docs.go
	$(GO) run ./docs/oas3gen -in docs/swagger.json -out docs/openapi.json
	cd docs/apicheck && $(GO) run $(OAPI_CODEGEN) -config oapi-codegen.yaml ../openapi.json

# Fails when the committed docs/ differ from what `make docs` generates
# (changed, deleted or new untracked files under docs/).
docs-check: docs
	@git diff --exit-code --stat -- docs && test -z "$$(git status --porcelain --untracked-files=all -- docs)" || \
		{ echo "docs-check: docs/ is not what 'make docs' generates; run 'make docs' and commit docs/"; git status --short -- docs; exit 1; }

# api-lint: validators that are not ours on the published description:
# swagger-cli (on swag's 2.0 source too, which /swagger/doc.json serves),
# and Redocly's recommended rules with warnings as errors
# (.ci/redocly.yaml). Pinned in .ci/package.json; npm ci installs them
# into .ci/node_modules once per lock file.
NPM_TOOLS := .ci/node_modules/.installed
$(NPM_TOOLS): .ci/package.json .ci/package-lock.json
	npm ci --prefix .ci --no-audit --no-fund --loglevel=error
	touch $@

api-lint: $(NPM_TOOLS)
	.ci/node_modules/.bin/swagger-cli validate docs/openapi.json
	.ci/node_modules/.bin/swagger-cli validate docs/swagger.json
	REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true \
		.ci/node_modules/.bin/redocly lint --config .ci/redocly.yaml docs/openapi.json

# api-check: the description's consumers against the real gateway, in the
# test-only module docs/apicheck: the client oapi-codegen generated (make
# docs), Swagger UI driven by headless Chromium (CHROMIUM, Debian's
# chromium package), and the READMEs' walkthroughs as pasted (bash, curl,
# jq, make run). -mod=mod: the gateway's own go.mod moves on without it.
CHROMIUM ?= /usr/bin/chromium
export CHROMIUM
api-check: api-lint
	cd docs/apicheck && $(GO) vet -mod=mod ./... && $(GO) test -mod=mod -race -count=1 -timeout 10m ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags failpoint ./...

# bench: the Go benchmarks of the new-payment and replay paths, then the real
# gateway binary on a throwaway PostgreSQL database, driven
# over HTTP (new payments, replays, a same-key storm, a mix), next to the
# seed's bare handler (bench/seedpeer) and pgbench running the same SQL, in
# the same rounds; then a slow provider (SIMULATOR_LATENCY=1s: 400
# closed-loop clients against the 400/s bound, then 2,000 clients, peak RSS;
# BENCH_FLAGS=-slow=false skips it, about 1 min); then the sweeper's recovery
# of 2,000 and 10,000 stuck payments at 100 ms per lookup; report on stdout
# and in bench/results/.
BENCH_DURATION ?= 10s
BENCH_CLIENTS  ?= 32
BENCH_FLAGS    ?=
bench:
	$(GO) test -run '^$$' -bench . -benchtime 3s ./payments/
	$(GO) test -run '^$$' -bench BenchmarkSweepBacklog -benchtime 1x -timeout 20m ./scheduler/
	$(GO) build -o bin/gateway .
	$(GO) build -o bin/bench-load ./bench/load
	$(GO) build -o bin/seedpeer ./bench/seedpeer
	bin/bench-load -gateway bin/gateway -seedpeer bin/seedpeer -db "$(TEST_DATABASE_URL)" -duration $(BENCH_DURATION) -clients $(BENCH_CLIENTS) -out bench/results $(BENCH_FLAGS)

# chaos: payments through a lossy proxy, a faulty out-of-process Paystack,
# gateway SIGKILLs and a PostgreSQL restart; then an audit that fails on any
# double charge or unsettled payment. CHAOS_FLAGS=-long for the long form.
CHAOS_FLAGS ?=
chaos:
	$(GO) build -o bin/gateway .
	$(GO) build -o bin/fakeprovider ./bench/fakeprovider
	$(GO) build -o bin/chaos ./bench/chaos
	bin/chaos -gateway bin/gateway -provider bin/fakeprovider -db "$(TEST_DATABASE_URL)" $(CHAOS_FLAGS)

# model: spin checks the Promela model of the idempotency key / payment state
# machine (idempotency/model/README.md): an exhaustive search of the fixed
# protocol must find no violation and no invalid end state, the -DBUG1
# variant (today's main) and the two other known-bad variants must violate an
# invariant, and every reachability probe must be reached. The verifiers are
# built in a temporary directory (kept, with the trails, on failure).
# Needs spin (apt-get install spin) and a C compiler.
SPIN     ?= spin
MODEL_CC ?= gcc
model:
	SPIN="$(SPIN)" CC="$(MODEL_CC)" sh idempotency/model/verify.sh
