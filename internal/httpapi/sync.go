package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/gorilla/handlers"
	"github.com/gorilla/mux"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro-sync/synchro/internal/auth"
	"github.com/synchro-sync/synchro/internal/db"
	"github.com/synchro-sync/synchro/internal/live"
	"github.com/synchro-sync/synchro/internal/metrics"
	"github.com/synchro-sync/synchro/internal/wire"
)

// Sync configures the sync endpoints.
type Sync struct {
	// Pool runs the SQL entry points; its connections act as synchro_service.
	Pool *pgxpool.Pool
	Auth auth.Authenticator
	Limits
	// CaptureWait bounds how long pull and rebuild wait for this client's pushed
	// changes to be captured before answering 503 capture_pending.
	CaptureWait time.Duration
	// PushLockTimeout bounds a push's wait for a row lock (then server_retryable).
	PushLockTimeout time.Duration
	// PushTimeout bounds the run time of a push transaction (statement_timeout
	// of its one statement): one over it is rolled back and answered 503
	// retry_later. 0 = unbounded.
	PushTimeout time.Duration
	// ReadinessInterval is how long one readiness answer serves pull and
	// rebuild (503 not_ready when capture is not ready); 0 means one second.
	ReadinessInterval time.Duration
	Log               *slog.Logger
	// Metrics, when set, counts error answers and push outcomes.
	Metrics *metrics.Metrics
	// MaxUserRequests bounds one user's sync requests in flight in this process
	// (429 retry_later above it), at most Pool's size minus one whatever it is
	// set to, so that one user never holds every connection; 0 = that bound.
	MaxUserRequests int
	// MaxBytesInFlight bounds the request body bytes of all sync requests in
	// flight in this process (503 retry_later above it); 0 = unbounded.
	MaxBytesInFlight int64
	// Live wakes pulls that wait for changes (wait_ms); nil: pulls never wait.
	Live *live.Hub
	// MaxPullWait caps a pull's wait_ms.
	MaxPullWait time.Duration

	once  sync.Once
	gate  readinessGate
	users userLimiter
	bytes byteBudget
}

// captureRetryInterval is how often a waiting pull or rebuild asks again.
const captureRetryInterval = 25 * time.Millisecond

type schemaRef struct {
	Version *int64 `json:"version,omitempty"`
	Hash    string `json:"hash,omitempty"`
}

type scopeCursor struct {
	Cursor *string `json:"cursor"`
}

type connectRequest struct {
	ClientID        string                 `json:"client_id"`
	Platform        string                 `json:"platform,omitempty"`
	AppVersion      string                 `json:"app_version,omitempty"`
	ProtocolVersion *int                   `json:"protocol_version"`
	Schema          *schemaRef             `json:"schema,omitempty"`
	ScopeSetVersion int64                  `json:"scope_set_version"`
	KnownScopes     map[string]scopeCursor `json:"known_scopes,omitempty"`
}

type mutation struct {
	MutationID  string                     `json:"mutation_id"`
	Table       string                     `json:"table"`
	Op          string                     `json:"op"`
	PK          map[string]json.RawMessage `json:"pk"`
	BaseVersion *string                    `json:"base_version,omitempty"`
	Columns     map[string]json.RawMessage `json:"columns,omitempty"`
}

type pushRequest struct {
	ClientID  string     `json:"client_id"`
	BatchID   string     `json:"batch_id,omitempty"`
	Schema    *schemaRef `json:"schema,omitempty"`
	Mutations []mutation `json:"mutations"`
}

type pullRequest struct {
	ClientID        string                 `json:"client_id"`
	Schema          *schemaRef             `json:"schema,omitempty"`
	ScopeSetVersion int64                  `json:"scope_set_version"`
	Scopes          map[string]scopeCursor `json:"scopes,omitempty"`
	Limit           *int                   `json:"limit,omitempty"`
	// WaitMs asks to hold the pull until one of its scopes changes (live.go);
	// the SQL entry point never sees it.
	WaitMs *int64 `json:"wait_ms,omitempty"`
}

type rebuildRequest struct {
	ClientID string     `json:"client_id"`
	Schema   *schemaRef `json:"schema,omitempty"`
	Scope    string     `json:"scope"`
	Cursor   *string    `json:"cursor"`
	Limit    *int       `json:"limit,omitempty"`
}

var ops = map[string]bool{"insert": true, "update": true, "upsert": true, "delete": true}

// routes registers the sync endpoints; answers are gzip-compressed for clients
// that accept it.
func (s *Sync) routes(r *mux.Router) {
	r.Handle("/sync/connect", s.handle("connect", s.connect)).Methods(http.MethodPost)
	r.Handle("/sync/push", s.handle("push", s.push)).Methods(http.MethodPost)
	r.Handle("/sync/pull", s.handle("pull", s.pull)).Methods(http.MethodPost)
	r.Handle("/sync/rebuild", s.handle("rebuild", s.rebuild)).Methods(http.MethodPost)
	r.Handle("/sync/schema", s.handle("schema", s.schema)).Methods(http.MethodGet)
}

// handle authenticates the request, runs fn and writes its answer.
func (s *Sync) handle(op string, fn func(w http.ResponseWriter, r *http.Request, user string) (json.RawMessage, *apiError)) http.Handler {
	return handlers.CompressHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.once.Do(s.setup)
		user, err := s.Auth.User(r)
		if err != nil {
			s.refuseEarly(w, op, &apiError{Status: http.StatusUnauthorized, Code: "auth_required", Message: err.Error()})
			return
		}
		if !s.users.acquire(user) {
			s.refuseEarly(w, op, &apiError{Status: http.StatusTooManyRequests, Code: "retry_later",
				Message: "too many requests of this user in flight; retry later", RetryAfter: 1})
			return
		}
		slot := &requestSlot{users: &s.users, bytes: &s.bytes, user: user, held: true}
		defer slot.end()
		reserved := min(max(r.ContentLength, 0), s.MaxBodyBytes)
		if r.ContentLength < 0 { // unknown length (chunked): the most it may be
			reserved = s.MaxBodyBytes
		}
		if !s.bytes.acquire(reserved) {
			s.refuseEarly(w, op, &apiError{Status: http.StatusServiceUnavailable, Code: "retry_later",
				Message: "the server is receiving too many request bytes; retry later", RetryAfter: 1})
			return
		}
		slot.reserved = reserved
		body, apiErr := fn(w, r.WithContext(context.WithValue(r.Context(), slotKey{}, slot)), user)
		if apiErr != nil {
			s.Metrics.ObserveSyncError(op, apiErr.Code)
			writeError(w, apiErr)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
	}))
}

// refuseEarly answers a request refused before its body is read, and closes
// the connection: the server would otherwise wait for the unread body (up to
// 256 KiB) to reuse the connection, held as long as the client sends nothing.
func (s *Sync) refuseEarly(w http.ResponseWriter, op string, e *apiError) {
	s.Metrics.ObserveSyncError(op, e.Code)
	w.Header().Set("Connection", "close")
	writeError(w, e)
}

// setup prepares the shared state of the handlers from the configuration.
func (s *Sync) setup() {
	s.gate = readinessGate{pool: s.Pool, interval: s.ReadinessInterval}
	if s.gate.interval <= 0 {
		s.gate.interval = time.Second
	}
	s.users = userLimiter{max: userBound(s.MaxUserRequests, s.Pool.Config().MaxConns)}
	s.bytes = byteBudget{max: s.MaxBytesInFlight}
}

// first is the first non-nil error of es.
func first(es ...*apiError) *apiError {
	for _, e := range es {
		if e != nil {
			return e
		}
	}
	return nil
}

func (s *Sync) connect(w http.ResponseWriter, r *http.Request, user string) (json.RawMessage, *apiError) {
	var req connectRequest
	if e := readBody(w, r, s.Limits, &req); e != nil {
		return nil, e
	}
	// platform and app_version are bounded like identifiers (a long dotted
	// app_version would overflow the minimum-version comparison).
	if e := first(s.identifier("client_id", req.ClientID, true), s.identifier("platform", req.Platform, false),
		s.identifier("app_version", req.AppVersion, false)); e != nil {
		return nil, e
	}
	if req.ProtocolVersion == nil {
		return nil, badRequest("protocol_version is required")
	}
	if e := s.scopes(req.KnownScopes); e != nil {
		return nil, e
	}
	return s.call(r.Context(), "connect", func(q *db.Queries) ([]byte, error) {
		return q.Connect(r.Context(), db.ConnectParams{UserID: user, Request: mustJSON(req)})
	})
}

func (s *Sync) push(w http.ResponseWriter, r *http.Request, user string) (json.RawMessage, *apiError) {
	var req pushRequest
	if e := readBody(w, r, s.Limits, &req); e != nil {
		return nil, e
	}
	if e := first(s.identifier("client_id", req.ClientID, true), s.identifier("batch_id", req.BatchID, false)); e != nil {
		return nil, e
	}
	if req.Mutations == nil {
		return nil, badRequest("mutations is required")
	}
	if len(req.Mutations) > s.MaxMutations {
		return nil, badRequest(fmt.Sprintf("a push carries at most %d mutations", s.MaxMutations))
	}
	seen := make(map[string]bool, len(req.Mutations))
	for i, m := range req.Mutations {
		if e := s.identifier(fmt.Sprintf("mutations[%d].mutation_id", i), m.MutationID, true); e != nil {
			return nil, e
		}
		// A mutation_id names one mutation: a second one under it would get the
		// first one's recorded outcome and never be applied.
		if seen[m.MutationID] {
			return nil, badRequest(fmt.Sprintf("mutations[%d].mutation_id repeats an earlier mutation of the batch", i))
		}
		seen[m.MutationID] = true
		if e := s.identifier(fmt.Sprintf("mutations[%d].table", i), m.Table, true); e != nil {
			return nil, e
		}
		if !ops[m.Op] {
			return nil, badRequest(fmt.Sprintf("mutations[%d].op must be insert, update, upsert or delete", i))
		}
		if m.PK == nil {
			return nil, badRequest(fmt.Sprintf("mutations[%d].pk is required", i))
		}
	}
	var refused []map[string]json.RawMessage
	req.Mutations, refused = s.oversized(req.Mutations)
	var out []byte
	err := pgx.BeginFunc(r.Context(), s.Pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		if err := q.SetPushTimeouts(r.Context(), db.SetPushTimeoutsParams{
			LockTimeout:      fmt.Sprintf("%dms", s.PushLockTimeout.Milliseconds()),
			StatementTimeout: fmt.Sprintf("%dms", s.PushTimeout.Milliseconds()),
		}); err != nil {
			return err
		}
		var err error
		out, err = q.Push(r.Context(), db.PushParams{UserID: user, Request: mustJSON(req), RowBytes: s.MaxPageBytes})
		return err
	})
	if err != nil {
		if pushTimedOut(err) {
			return nil, &apiError{Status: http.StatusServiceUnavailable, Code: "retry_later",
				Message: "the push ran longer than its time budget and changed nothing; retry later, or push fewer mutations", RetryAfter: 1}
		}
		return nil, fromDatabase(err, s.Log, "push")
	}
	return s.renderServerRows(out, refused)
}

// oversized splits off the mutations carrying a column value larger than
// MaxValueBytes (its JSON text): each is rejected validation_failed here,
// before SQL, and changes nothing (it is not recorded either: a replay is
// rejected alike). The others are returned to be pushed.
func (s *Sync) oversized(muts []mutation) ([]mutation, []map[string]json.RawMessage) {
	kept := muts[:0:0]
	var refused []map[string]json.RawMessage
	for _, m := range muts {
		large := false
		for _, v := range m.Columns {
			large = large || len(v) > s.MaxValueBytes
		}
		if !large {
			kept = append(kept, m)
			continue
		}
		refused = append(refused, map[string]json.RawMessage{
			"mutation_id": mustJSON(m.MutationID), "table": mustJSON(m.Table), "pk": mustJSON(m.PK),
			"status": mustJSON("rejected"), "code": mustJSON("validation_failed"),
			"message": mustJSON(fmt.Sprintf("a column value is larger than %d bytes (its JSON text); store large values outside the synced row", s.MaxValueBytes)),
		})
	}
	return kept, refused
}

func (s *Sync) pull(w http.ResponseWriter, r *http.Request, user string) (json.RawMessage, *apiError) {
	var req pullRequest
	if e := readBody(w, r, s.Limits, &req); e != nil {
		return nil, e
	}
	if e := s.identifier("client_id", req.ClientID, true); e != nil {
		return nil, e
	}
	if e := s.scopes(req.Scopes); e != nil {
		return nil, e
	}
	limit, e := s.pageSize(req.Limit)
	if e != nil {
		return nil, e
	}
	wait, e := s.pullWait(req.WaitMs)
	if e != nil {
		return nil, e
	}
	req.WaitMs = nil
	pull := func() (json.RawMessage, *apiError) {
		return s.waitForCapture(r.Context(), "pull", func(q *db.Queries) ([]byte, error) {
			return q.Pull(r.Context(), db.PullParams{UserID: user, Request: mustJSON(req), PageLimit: int32(limit), PageBytes: s.MaxPageBytes})
		})
	}
	if wait == 0 {
		return pull()
	}
	return s.livePull(r.Context(), user, slices.Collect(maps.Keys(req.Scopes)), wait, pull)
}

func (s *Sync) rebuild(w http.ResponseWriter, r *http.Request, user string) (json.RawMessage, *apiError) {
	var req rebuildRequest
	if e := readBody(w, r, s.Limits, &req); e != nil {
		return nil, e
	}
	if e := first(s.identifier("client_id", req.ClientID, true), s.identifier("scope", req.Scope, true)); e != nil {
		return nil, e
	}
	if req.Cursor != nil && len(*req.Cursor) > 4096 {
		return nil, badRequest("cursor is too long")
	}
	limit, e := s.pageSize(req.Limit)
	if e != nil {
		return nil, e
	}
	return s.waitForCapture(r.Context(), "rebuild", func(q *db.Queries) ([]byte, error) {
		return q.Rebuild(r.Context(), db.RebuildParams{UserID: user, Request: mustJSON(req), PageLimit: int32(limit), PageBytes: s.MaxPageBytes})
	})
}

func (s *Sync) schema(_ http.ResponseWriter, r *http.Request, _ string) (json.RawMessage, *apiError) {
	return s.call(r.Context(), "schema", func(q *db.Queries) ([]byte, error) { return q.SyncSchema(r.Context()) })
}

// scopes checks the scope map of a pull or connect.
func (s *Sync) scopes(m map[string]scopeCursor) *apiError {
	if len(m) > s.MaxScopes {
		return badRequest(fmt.Sprintf("at most %d scopes per request", s.MaxScopes))
	}
	for id, c := range m {
		if e := s.identifier("scope", id, true); e != nil {
			return e
		}
		if c.Cursor != nil && len(*c.Cursor) > 4096 {
			return badRequest("cursor is too long")
		}
	}
	return nil
}

// call runs one SQL entry point on the pool.
func (s *Sync) call(ctx context.Context, op string, fn func(q *db.Queries) ([]byte, error)) (json.RawMessage, *apiError) {
	out, err := fn(db.New(s.Pool))
	if err != nil {
		return nil, fromDatabase(err, s.Log, op)
	}
	return out, nil
}

// waitForCapture runs a pull or rebuild when capture is ready (else 503
// not_ready); while it is refused with capture_pending it asks again until
// CaptureWait has passed (the refusal advanced nothing, so asking again is safe).
func (s *Sync) waitForCapture(ctx context.Context, op string, fn func(q *db.Queries) ([]byte, error)) (json.RawMessage, *apiError) {
	if !s.gate.isReady(ctx) {
		return nil, &apiError{Status: http.StatusServiceUnavailable, Code: "not_ready",
			Message: "capture is not ready; retry later", RetryAfter: 1}
	}
	deadline := time.Now().Add(s.CaptureWait)
	for {
		out, e := s.call(ctx, op, fn)
		if e == nil || e.Code != "capture_pending" || time.Now().After(deadline) {
			return out, e
		}
		select {
		case <-ctx.Done():
			return nil, e
		case <-time.After(captureRetryInterval):
		}
	}
}

// renderServerRows replaces every server_row_text of a push answer (rows as
// synchro.row_text returns them) with server_row in wire form, and counts the
// outcomes. An outcome with a row answers its pk in the form pull delivers the
// row under (a uuid in lower case with hyphens, an integer key as a number),
// whatever form the mutation gave it in; an outcome without a row echoes the
// pk as sent.
//
// refused are outcomes rejected before SQL (oversized): they end the rejected
// list.
func (s *Sync) renderServerRows(body []byte, refused []map[string]json.RawMessage) (json.RawMessage, *apiError) {
	log := s.Log
	var resp map[string]json.RawMessage
	if err := json.Unmarshal(body, &resp); err != nil {
		return nil, renderFailed(log)
	}
	for _, list := range []string{"accepted", "rejected"} {
		var outcomes []map[string]json.RawMessage
		if err := json.Unmarshal(resp[list], &outcomes); err != nil {
			return nil, renderFailed(log)
		}
		if list == "rejected" {
			outcomes = append(outcomes, refused...)
		}
		for _, o := range outcomes {
			var code string
			if json.Unmarshal(o["code"], &code) != nil || code == "" {
				code = "applied"
			}
			s.Metrics.ObservePushOutcome(code)
			text, ok := o["server_row_text"]
			if !ok {
				continue
			}
			delete(o, "server_row_text")
			var cols []json.RawMessage
			if err := json.Unmarshal(text, &cols); err != nil {
				return nil, renderFailed(log)
			}
			if cols == nil {
				o["server_row"] = json.RawMessage("null")
				continue
			}
			row, err := wire.Row(cols)
			if err != nil {
				return nil, renderFailed(log)
			}
			o["server_row"] = row
			if pk, ok := rowKey(o["pk"], row); ok {
				o["pk"] = pk
			}
		}
		if outcomes == nil {
			resp[list] = json.RawMessage("null")
			continue
		}
		b := []byte{'['}
		for i, o := range outcomes {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, rawObject(o)...)
		}
		resp[list] = append(b, ']')
	}
	return rawObject(resp), nil
}

// rawObject is m as a JSON object in name order (as json.Marshal writes it),
// its values as they are: a server_row may be nested deeper than json.Marshal
// takes a json.RawMessage (package wire).
func rawObject(m map[string]json.RawMessage) json.RawMessage {
	return wire.AppendObject(nil, wire.SortedMembers(m))
}

// rowKey is the pk object {key column: value} with the value taken from row
// (server_row in wire form), the rendering pull's pk has for the key types
// Synchro accepts (text, varchar, uuid: the text output as a string; integers:
// a number). ok is false unless pk names one column and row has it.
func rowKey(pk, row json.RawMessage) (json.RawMessage, bool) {
	var key map[string]json.RawMessage
	if json.Unmarshal(pk, &key) != nil || len(key) != 1 {
		return nil, false
	}
	cols, err := wire.Members(row)
	if err != nil {
		return nil, false
	}
	for _, c := range cols {
		if _, ok := key[c.Name]; ok && string(c.Value) != "null" {
			return mustJSON(map[string]json.RawMessage{c.Name: c.Value}), true
		}
	}
	return nil, false
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only for values built from decoded JSON
	}
	return b
}
