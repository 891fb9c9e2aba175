package client

import (
	"context"
	"errors"
	"time"
)

// Live keeps the replica in sync until ctx ends, with changes arriving as they
// are committed: it runs a Sync, then a live pull that the server holds for up
// to wait until a change of one of the replica's scopes is captured (its
// changes are applied at once), then Syncs again, and so on. Local writes are
// pushed at the next Sync: call Poke after writing to cut a wait short. Each
// Sync's report and error go to onSync (nil: none). A retryable failure is
// tried again after a pause; any other ends Live with it. Keep wait below the
// HTTP client's timeout and any proxy's idle timeout (30 s is safe).
func (c *Client) Live(ctx context.Context, wait time.Duration, onSync func(Report, error)) error {
	pause := c.cfg.BackoffBase
	for {
		rep, err := c.SyncReport(ctx)
		if onSync != nil {
			onSync(rep, err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var e *Error
		switch {
		case err == nil:
			pause = c.cfg.BackoffBase
			err = c.waitForChanges(ctx, wait)
		case errors.As(err, &e) && e.Retryable:
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(pause):
			}
			pause = min(2*pause, c.cfg.BackoffMax)
			continue
		default:
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil && !(errors.As(err, &e) && e.Retryable) {
			return err
		}
	}
}

// Poke ends the wait of Live's live pull (if one waits), so that the next
// Sync pushes what was written locally.
func (c *Client) Poke() {
	select {
	case c.poke <- struct{}{}:
	default:
	}
}

// waitForChanges runs one live pull (and its further pages), applied as
// Sync's pulls are; a Poke ends it early with nothing applied.
func (c *Client) waitForChanges(ctx context.Context, wait time.Duration) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-c.poke:
			cancel()
		case <-wctx.Done():
		}
	}()
	c.mu.Lock()
	defer c.mu.Unlock()
	var rep Report
	err := c.pull(wctx, &rep, wait)
	if wctx.Err() != nil && ctx.Err() == nil {
		return nil // poked
	}
	return err
}
