package client

import (
	"fmt"
	"time"
)

// pushApplier applies a push answer to the replica: an applier with the
// methods of the push outcomes.
type pushApplier struct{ *applier }

// outcomes applies a push answer to the batch; it returns how many mutations
// stay in flight (answered server_retryable, or not answered at all). An
// answer carrying server_row moves the row to that row's key (serverKey).
//   - applied: the entry leaves the queue, the answer is the row's server image
//     and later entries of the row take its version as base_version; the local
//     row takes server_row unless later local changes are queued. An answer
//     that omitted the row (server_row_omitted: the push answer's byte budget
//     was spent) only sets that base_version: the local row stays as pushed
//     and its server image arrives by pull.
//   - conflict: the entry leaves the queue, a rejection is recorded, server_row
//     is the row's server image and the local row takes it (is deleted when it
//     is null, or when the row is in none of the replica's scopes) unless later
//     local changes are queued. Those keep their base_version (the version
//     they were made on), so the server answers them too, as a conflict.
//   - rejected: likewise, the row is reverted to its last server image
//     (deleted when there is none) unless later local changes are queued.
//   - retry: the entry stays in flight and is resent with the same mutation_id.
//
// Any other status is an error: the transaction rolls back, the batch stays in
// flight.
func (a pushApplier) outcomes(batch []queued, answers []outcome, rep *Report) (int, error) {
	byID := map[string]queued{}
	for _, q := range batch {
		byID[q.m.MutationID] = q
	}
	retried := 0
	for _, o := range answers {
		q, ok := byID[o.MutationID]
		if !ok {
			continue
		}
		delete(byID, o.MutationID)
		switch o.Status {
		case "retry":
			retried++
			rep.Retried++
			continue
		case "applied", "conflict", "rejected":
		default: // never taken for a rejection: the local change would be discarded
			return 0, fmt.Errorf("synchro: push answered mutation %s with unknown status %q", o.MutationID, o.Status)
		}
		if err := a.settle(q, o); err != nil {
			return 0, err
		}
		t := a.m.byName[q.m.Table]
		if t == nil { // no local table (it cannot have captured the entry)
			continue
		}
		k, err := a.key(t, q.m.PK)
		if err == nil && !isNull(o.ServerRow) {
			k, err = a.serverKey(t, k, o.ServerRow)
		}
		if err != nil {
			return 0, err
		}
		switch {
		case o.Status == "applied":
			rep.Pushed++
			err = a.applied(t, k, q, o)
		case o.Status == "conflict":
			rep.Rejected++
			err = a.conflicted(t, k, o)
		default:
			rep.Rejected++
			err = a.revert(t, k)
		}
		if err != nil {
			return 0, err
		}
	}
	return retried + len(byID), nil
}

// settle removes an answered entry from the queue, recording it when it was
// refused. The row's later entries (changes made while it was in flight) stay
// queued, to be answered on their own; after a refused insert or delete a later
// update becomes an upsert, as the capture triggers merge an update into them.
func (a pushApplier) settle(q queued, o outcome) error {
	if _, err := a.tx.ExecContext(a.ctx, `DELETE FROM _synchro_queue WHERE seq = ?`, q.seq); err != nil {
		return err
	}
	if o.Status == "applied" {
		return nil
	}
	if q.m.Op != "update" {
		if _, err := a.tx.ExecContext(a.ctx, `UPDATE _synchro_queue SET op = 'upsert' WHERE tbl = ? AND pk = ? AND op = 'update'`, q.m.Table, q.key); err != nil {
			return err
		}
	}
	code := o.Code
	if code == "" {
		code = o.Status
	}
	_, err := a.tx.ExecContext(a.ctx, `INSERT INTO _synchro_rejections (mutation_id, tbl, pk, code, message, at) VALUES (?, ?, ?, ?, ?, ?)`,
		q.m.MutationID, q.m.Table, q.key, code, o.Message, time.Now().UTC().Format(time.RFC3339Nano))
	return err
}

func (a pushApplier) applied(t *table, k rowKey, q queued, o outcome) error {
	if o.ServerRowOmitted && q.m.Op != "delete" {
		// The row was applied as pushed; its server image comes by pull. Later
		// entries of the row are made on this version.
		_, err := a.tx.ExecContext(a.ctx, `UPDATE _synchro_queue SET base_version = ? WHERE tbl = ? AND pk = ?`, o.ServerVersion, t.Name, k.text)
		return err
	}
	if q.m.Op == "delete" || isNull(o.ServerRow) {
		if err := a.dropImage(t, k); err != nil {
			return err
		}
		if _, err := a.tx.ExecContext(a.ctx, `UPDATE _synchro_queue SET base_version = NULL WHERE tbl = ? AND pk = ?`, t.Name, k.text); err != nil {
			return err
		}
		if q.m.Op == "delete" {
			return nil
		}
		// A write applied into none of the user's scopes (a write policy let
		// it, or the user left the row's scopes meanwhile): no pull will ever
		// deliver the row, so the replica drops it, unless a scope still holds
		// it (that scope's pull removes it) or later changes are queued.
		return a.forgetUnheld(t, k)
	}
	if err := a.setImage(t, k, o.ServerRow, o.ServerVersion, true); err != nil {
		return err
	}
	if _, err := a.tx.ExecContext(a.ctx, `UPDATE _synchro_queue SET base_version = ? WHERE tbl = ? AND pk = ?`, o.ServerVersion, t.Name, k.text); err != nil {
		return err
	}
	return a.resolve(t, k, o.ServerRow)
}

func (a pushApplier) conflicted(t *table, k rowKey, o outcome) error {
	known, err := a.held(t, k)
	if err != nil {
		return err
	}
	if !known {
		img, err := a.image(t, k)
		if err != nil {
			return err
		}
		known = img != nil
	}
	if isNull(o.ServerRow) || !known {
		if err := a.dropImage(t, k); err != nil {
			return err
		}
		return a.resolve(t, k, nil)
	}
	if err := a.setImage(t, k, o.ServerRow, o.ServerVersion, true); err != nil {
		return err
	}
	return a.resolve(t, k, o.ServerRow)
}

// revert restores the row's last server image, or deletes it when there is
// none (unless later changes of it are queued).
func (a pushApplier) revert(t *table, k rowKey) error {
	img, err := a.image(t, k)
	if err != nil {
		return err
	}
	return a.resolve(t, k, img)
}
