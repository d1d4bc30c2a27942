# OncePay gateway. `make run` starts it on :8080 (SQLite + simulator when no
# DATABASE_URL); `make test` runs vet and the race-enabled tests against the
# PostgreSQL of TEST_DATABASE_URL.
GO       ?= go
SWAG     ?= $(shell $(GO) env GOPATH)/bin/swag
SWAG_VERSION := v1.16.6
export TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/test?sslmode=disable

.PHONY: run build test docs docs-check lint bench chaos migrate fmt tools

run:
	$(GO) run .

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

docs: $(SWAG)
	$(SWAG) init --quiet -g main.go -o docs --parseDependency=false --parseInternal --outputTypes go,json,yaml
	gofmt -w docs

# Fails when the committed docs/ differ from what `make docs` generates.
docs-check: docs
	git diff --exit-code -- docs

fmt:
	gofmt -w $$(git ls-files '*.go')

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags failpoint ./...

bench:
	$(GO) test -run '^$$' -bench . -benchtime 2s ./payments/...

chaos:
	@echo "chaos: not implemented yet"; exit 1
