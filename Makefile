# Synchro: the two commands are `make run` and `make test`.
.PHONY: run test generate lint bench build stop-db soak

GO ?= go

run:
	scripts/run.sh

test:
	scripts/test.sh

# Long convergence simulation: make soak SEED=42 DURATION=10m (DURATION: a Go
# duration or a number of steps; both default to the short run of make test).
soak:
	SYNCHRO_SEED=$(SEED) SYNCHRO_SIM_DURATION=$(DURATION) scripts/with-cluster.sh $(GO) test -count=1 -timeout 0 -run TestConvergence -v ./tests

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
