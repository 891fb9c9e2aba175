# Synchro: the two commands are `make run` and `make test`.
.PHONY: run test generate lint bench build stop-db

GO ?= go

run:
	scripts/run.sh

test:
	scripts/test.sh

build:
	$(GO) build ./...

generate:
	$(GO) tool sqlc generate

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

bench:
	scripts/bench.sh

stop-db:
	scripts/pgcluster.sh stop .synchro/pg
