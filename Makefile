# Synchro: the two commands are `make run` and `make test`.
.PHONY: run test generate lint bench build stop-db soak status token

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

# The database make run uses: SYNCHRO_DATABASE_URL, else the local cluster.
LOCAL_DATABASE_URL = postgres://synchro@127.0.0.1:$(or $(SYNCHRO_PG_PORT),54329)/synchro?sslmode=disable

# make status: synchroctl status of that database (exit 3 when not ready).
status:
	@$(GO) build -o .synchro/bin/ ./cmd/synchroctl
	@SYNCHRO_DATABASE_URL="$${SYNCHRO_DATABASE_URL:-$(LOCAL_DATABASE_URL)}" .synchro/bin/synchroctl status

# make token USER=u1: a development JWT for user u1, signed with the secret
# make run uses (SYNCHRO_JWT_HS256_SECRET, else .synchro/dev-jwt-secret).
token:
	@$(GO) build -o .synchro/bin/ ./cmd/synchroctl
	@secret="$${SYNCHRO_JWT_HS256_SECRET:-$$(cat .synchro/dev-jwt-secret 2>/dev/null)}"; \
	if [ -z "$$secret" ]; then echo "make token: no .synchro/dev-jwt-secret yet: run make run first" >&2; exit 1; fi; \
	SYNCHRO_JWT_HS256_SECRET="$$secret" .synchro/bin/synchroctl dev-token --user "$(USER)"
