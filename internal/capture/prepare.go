package capture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro-sync/synchro/internal/db"
	"github.com/synchro-sync/synchro/internal/wire"
)

// Preparer prepares the whole transactions of one streaming session for
// materialization, in commit order: it pairs their row events with their
// fences under the registry generation selected for each, checks their
// columns against the registration, renders their row images (completing
// partial ones over the batch's earlier images) and writes a spilled
// transaction's images back to its spill file.
type Preparer struct {
	pool *pgxpool.Pool
	reg  *registry
	// durable is the materialized high-watermark at session start: transactions
	// up to it are replays of durable ones (a stop before acknowledgement).
	durable pglogrepl.LSN
	// active is the registry generation active after the last prepared
	// transaction (at session start: after the last materialized one).
	active int64
	// only, for a bootstrap's stage, is the set of relations it stages: the
	// events of every other relation are paired and left out. nil: all.
	only map[int64]bool
	// activated holds the relations of bootstraps whose barrier this session
	// prepared for activation: from the transaction after it on they are
	// materialized like any other (no longer held as pending).
	activated map[int64]bool
	staged    bool // a stage's preparer, which activates no bootstrap
	// Log, when set, reports a wait for a bootstrap's stage at its barrier.
	Log *slog.Logger
}

// NewPreparer loads the durable registry and the materialized position of the
// active stream or (staged valid) of a reset's or bootstrap's stage; only
// names the relations a bootstrap's stage materializes (nil: every one).
func NewPreparer(ctx context.Context, pool *pgxpool.Pool, staged pgtype.UUID, only []int64) (*Preparer, error) {
	p := &Preparer{pool: pool, activated: map[int64]bool{}, staged: staged.Valid}
	if only != nil {
		p.only = make(map[int64]bool, len(only))
		for _, id := range only {
			p.only[id] = true
		}
	}
	var err error
	if p.reg, err = loadRegistry(ctx, pool); err != nil {
		return nil, err
	}
	pos, err := db.New(pool).GetMaterializedPosition(ctx, staged)
	if err != nil {
		return nil, err
	}
	p.active = pos.RegistryGeneration
	if p.durable, err = pglogrepl.ParseLSN(pos.DurableLsn); err != nil {
		return nil, err
	}
	return p, nil
}

// Batch is a batch of transactions prepared in commit order. When Poison is
// set, PoisonTxn (the transaction after the prepared ones) cannot be prepared
// and is a poison transaction.
type Batch struct {
	Txns      []Prepared
	Poison    *Failure
	PoisonTxn *Txn
}

// Prepare prepares txns in commit order; it stops at the first one that cannot
// be prepared, which becomes the batch's poison transaction. An error is the
// worker's own (the database, a spill file), not a transaction's.
func (p *Preparer) Prepare(ctx context.Context, txns []*Txn) (Batch, error) {
	b := Batch{Txns: make([]Prepared, 0, len(txns))}
	images := batchImages(txns)
	for _, txn := range txns {
		if txn.CommitLSN <= p.durable {
			// A durable transaction replayed: its ledger row makes materialization
			// a no-op. It is not paired again, because the registry generation
			// active before it is no longer known (its own activations moved it).
			b.Txns = append(b.Txns, Prepared{CommitLSN: txn.CommitLSN, EndLSN: txn.EndLSN,
				Xid: txn.Xid, CommitTime: txn.CommitTime, EventCount: len(txn.Rows), RegistryGeneration: p.active})
			continue
		}
		if p.needsRegistry(txn) {
			// The registering transaction is decoded as soon as its commit is in
			// the WAL, a moment (with a synchronous standby, a round trip to it)
			// before its registration is visible to the worker's snapshot.
			if err := db.New(p.pool).AwaitVisible(ctx, []int64{int64(txn.Xid)}); err != nil {
				return b, err
			}
			reg, err := loadRegistry(ctx, p.pool)
			if err != nil {
				return b, err
			}
			p.reg = reg
		}
		pt, err := prepare(txn, p.reg, p.active, images, p.applies)
		if err != nil {
			if !errors.As(err, &b.Poison) {
				return b, err
			}
			b.PoisonTxn = txn
			break
		}
		if txn.Barrier != "" && !p.staged {
			if pt.Bootstrap, err = p.awaitBootstrap(ctx, txn); err != nil {
				return b, err
			}
		}
		p.active = pt.RegistryGeneration
		b.Txns = append(b.Txns, pt)
	}
	return b, nil
}

// applies reports whether the events of relation rid are materialized: in a
// bootstrap's stage only its relations', in the active stream every one but
// those waiting for their bootstrap.
func (p *Preparer) applies(rid int64) bool {
	if p.only != nil {
		return p.only[rid]
	}
	return !p.reg.pending[rid] || p.activated[rid]
}

// bootstrapPoll is how often the capture worker looks at a bootstrap whose
// barrier it decoded before the bootstrap's stage reached it.
const bootstrapPoll = 20 * time.Millisecond

// awaitBootstrap decides, at a transaction carrying a barrier, whether the
// bootstrap it names is activated right after it (its id) or not (""): it is
// when the bootstrap's stage reached exactly this barrier and was verified
// (ready), or when it is a registry change with nothing to stage that this
// very transaction recorded (ready at once). While the stage has not reached it yet the stream waits here (the
// stage trails the same WAL; its coordinator writes the barrier only once the
// stage is close behind); an aborted bootstrap, or a barrier that is not a
// bootstrap's, activates nothing. The relations of an activated bootstrap are
// materialized from the next transaction on.
func (p *Preparer) awaitBootstrap(ctx context.Context, txn *Txn) (string, error) {
	var id pgtype.UUID
	if err := id.Scan(txn.Barrier); err != nil {
		return "", nil // not a bootstrap's
	}
	started, logged := time.Now(), time.Now()
	for {
		b, err := db.New(p.pool).BootstrapAtBarrier(ctx, id)
		if errors.Is(err, pgx.ErrNoRows) {
			return "", nil // a stream reset's barrier
		}
		if err != nil {
			return "", err
		}
		switch b.Phase {
		case "ready":
			staged := b.BarrierCommitLsn != ""
			if (staged && b.BarrierCommitLsn != txn.CommitLSN.String()) || (!staged && b.BarrierXid != int64(txn.Xid)) {
				return "", nil
			}
			for _, rid := range b.RelationIds {
				p.activated[rid] = true
			}
			return txn.Barrier, nil
		case "staging", "catching_up":
		default: // activated at another barrier, aborted or retired
			return "", nil
		}
		if p.Log != nil && time.Since(logged) >= 5*time.Second {
			p.Log.Info("capture waits at a bootstrap barrier for the bootstrap's stage", "bootstrap", txn.Barrier,
				"phase", b.Phase, "waited", time.Since(started).Round(time.Second))
			logged = time.Now()
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(bootstrapPoll):
		}
	}
}

func (p *Preparer) needsRegistry(txn *Txn) bool {
	for _, a := range txn.Activations {
		if a.Generation > p.reg.latest {
			return true
		}
	}
	return false
}

// rowImages holds the latest image of each row among the transactions of one
// batch, so that a partial image (unchanged TOAST values left out) completes over
// the row's earlier image in the batch: materialization completes a partial image
// only over the projection as it was before the batch (or segment).
type rowImages map[rowID]rowImage

type rowID struct {
	rel int64
	key string
}

// rowImage is a row's image; partial when it still lacks unchanged TOAST values
// (no earlier image of the row in the batch was complete).
type rowImage struct {
	img     storedImage
	spill   *Spill // where img is when it was spilled
	partial bool
}

// batchImages returns an empty rowImages for a batch that has partial images,
// and nil (nothing to keep: no image needs an earlier one) for any other.
func batchImages(txns []*Txn) rowImages {
	for _, t := range txns {
		if t.Unchanged {
			return rowImages{}
		}
	}
	return nil
}

// overlay returns base with the fields of top set over it, in name order. A
// value may be nested deeper than encoding/json allows (package wire).
func overlay(base, top json.RawMessage) (json.RawMessage, error) {
	fields, err := wire.Members(base)
	if err != nil {
		return nil, err
	}
	over, err := wire.Members(top)
	if err != nil {
		return nil, err
	}
	for _, m := range over {
		if i, found := slices.BinarySearchFunc(fields, m.Name, func(f wire.Member, name string) int { return strings.Compare(f.Name, name) }); found {
			fields[i].Value = m.Value
		} else {
			fields = slices.Insert(fields, i, m)
		}
	}
	return wire.AppendObject(nil, fields), nil
}

// prepare selects the registry generation of every row event, reconciles events
// with fences and renders the applicable events, completing partial images over
// last (the batch's rows so far, updated here; nil when the batch has no
// partial image). A spilled transaction's images are written back to its
// spill file. A prepared transaction lets go of its row events and fences: only
// its images and positions are needed while it is materialized. The events of
// relations applies rejects are paired (their fences are checked) but not
// rendered. A transaction that cannot be prepared is a poison transaction: the
// error is a *Failure (any other error is the worker's own).
func prepare(txn *Txn, reg *registry, active int64, last rowImages, applies func(int64) bool) (Prepared, error) {
	out := Prepared{
		CommitLSN: txn.CommitLSN, EndLSN: txn.EndLSN, Xid: txn.Xid,
		CommitTime: txn.CommitTime, EventCount: len(txn.Rows), RegistryGeneration: active,
		spill: txn.Spill(),
	}
	for _, a := range txn.Activations {
		if a.Generation > reg.latest {
			return out, &Failure{Class: ClassRegistry, Detail: fmt.Sprintf("registry generation %d is not durable", a.Generation)}
		}
		out.RegistryGeneration = max(out.RegistryGeneration, a.Generation)
	}
	if len(reg.dropped) > 0 {
		txn.Fences = slices.DeleteFunc(txn.Fences, func(f Fence) bool { return reg.dropped[f.RelationID] })
	}
	pairs, err := Pair(txn, reg.resolver(active, txn))
	if err != nil {
		return out, err
	}
	out.Events = make([]stagedEvent, 0, len(pairs))
	for i := range pairs {
		if !applies(pairs[i].Reg.RelationID) {
			continue
		}
		ev, err := prepareEvent(txn, reg, &pairs[i], last)
		if err != nil {
			return out, err
		}
		out.Events = append(out.Events, ev)
	}
	out.Applied = len(out.Events)
	txn.ForgetEvents()
	return out, nil
}

// prepareEvent renders one paired row event. Its decoded values are let go
// once they are in its image, so that a large transaction is not held twice
// (its quarantine needs only positions).
func prepareEvent(txn *Txn, reg *registry, p *Paired, last rowImages) (stagedEvent, error) {
	r, _ := reg.byID(p.Reg.RelationID)
	ev := stagedEvent{Ordinal: p.Event.Ordinal, RelationID: p.Reg.RelationID, Key: p.Key, Op: p.Event.Op,
		Version: p.Fence.Version}
	var ok bool
	if ev.FenceID, ok = fenceUUID(p.Fence.FenceID); !ok {
		return ev, &Failure{Class: ClassFenceMalformed, RelationID: p.Reg.RelationID, Detail: "fence_id is not a UUID"}
	}
	if err := txn.Load(p.Event); err != nil {
		return ev, err
	}
	defer func() { p.Event.Old, p.Event.New = nil, nil }()
	if err := checkColumns(p.Event, r); err != nil {
		return ev, err
	}
	id := rowID{p.Reg.RelationID, p.Key}
	if p.Event.Op == "delete" {
		delete(last, id)
		return ev, nil
	}
	img, partial, err := image(p.Event.New, r.Columns)
	if err != nil {
		return ev, &Failure{Class: ClassDecode, RelationID: p.Reg.RelationID, Detail: err.Error()}
	}
	// The merged image stays partial when the earlier one was partial too.
	if prev, ok := last[id]; ok && partial {
		base, err := prev.img.get(prev.spill)
		if err != nil {
			return ev, err
		}
		if img, err = overlay(base, img); err != nil {
			return ev, &Failure{Class: ClassDecode, RelationID: p.Reg.RelationID, Detail: "image is not an object"}
		}
		partial = prev.partial
	}
	ev.Image, ev.Partial = storedImage{inline: img}, partial
	if sp := txn.Spill(); sp != nil {
		if ev.Image.at, err = sp.Put(img); err != nil {
			return ev, err
		}
		ev.Image.inline = nil
	}
	if last != nil {
		last[id] = rowImage{ev.Image, txn.Spill(), partial}
	}
	return ev, nil
}

// checkColumns reports relation drift: a registered column renamed or dropped
// would silently leave every later image, and one of another type would
// change its values' type on the wire. A delete decodes the key alone.
func checkColumns(ev *RowEvent, r registration) error {
	for col, typ := range r.Columns {
		c, ok := ev.Value(col)
		if !ok && ev.Op != "delete" {
			return &Failure{Class: ClassRelationDrift, RelationID: r.RelationID,
				Detail: "a registered column is missing from the decoded relation"}
		}
		if ok && c.TypeOID != typ {
			return &Failure{Class: ClassRelationDrift, RelationID: r.RelationID,
				Detail: "a registered column has another type in the decoded relation"}
		}
	}
	return nil
}

// fenceUUID decodes a fence ID, which ParseFence checked is a UUID in
// canonical text form.
func fenceUUID(id string) (pgtype.UUID, bool) {
	u := pgtype.UUID{Valid: true}
	n := 0
	for i := 0; i < len(id); i++ {
		if id[i] == '-' {
			continue
		}
		d, ok := hexDigit(id[i])
		if !ok || n == 32 {
			return u, false
		}
		u.Bytes[n/2] |= d << (4 * (1 - n%2))
		n++
	}
	return u, n == 32
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}
