-- +goose Up
-- Cursors bound to their client and to the assignment of their scope: each
-- client records, per assigned scope, the epoch at which the scope was last added
-- to its scope set (a value of synchro.scope_epoch_seq, never reused, so a scope
-- removed and assigned again, or a client registered again, gets a new epoch).
-- Scope cursors and rebuild session cursors carry the client and the epoch, and
-- resume only while both still match (synchro.read_scope_token). Invariant: the
-- keys of scope_epoch are exactly scope_set (synchro.client_session keeps both).
-- Clients existing before this migration get one fresh epoch for their whole set;
-- cursors issued before it do not carry the binding and force a rebuild.
CREATE SEQUENCE synchro.scope_epoch_seq;

ALTER TABLE synchro.client
    ADD COLUMN scope_epoch jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(scope_epoch) = 'object');

UPDATE synchro.client k
SET scope_epoch = coalesce((SELECT jsonb_object_agg(s, e.v) FROM unnest(k.scope_set) s), '{}')
FROM (SELECT k2.client_id, nextval('synchro.scope_epoch_seq') AS v FROM synchro.client k2) e
WHERE e.client_id = k.client_id;

-- +goose Down
ALTER TABLE synchro.client DROP COLUMN scope_epoch CASCADE;
DROP SEQUENCE synchro.scope_epoch_seq CASCADE;
