-- +goose Up
-- Sync protocol v3 state (docs/protocol.md): shared scopes, scope assignment,
-- clients and their scope sets, durable push outcomes, schema versions, write
-- policies and the key that signs cursors.

CREATE EXTENSION IF NOT EXISTS pgcrypto WITH SCHEMA synchro;

ALTER TABLE synchro.settings
    -- Lowest protocol version connect accepts (426 upgrade_required below it).
    ADD COLUMN min_protocol_version integer NOT NULL DEFAULT 3,
    -- Lowest app_version (dotted numbers) connect accepts; NULL = any.
    ADD COLUMN min_app_version text CHECK (min_app_version ~ '^[0-9]+(\.[0-9]+)*$'),
    -- Scope assignment function (user_id text) RETURNS SETOF text; NULL = the
    -- default: user:<user_id> plus every shared scope.
    ADD COLUMN scope_assignment regprocedure;

-- The key that signs cursors and rebuild sessions. Only definer functions read it.
CREATE TABLE synchro.cursor_key (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    key       bytea NOT NULL CHECK (length(key) >= 32)
);
INSERT INTO synchro.cursor_key (key) VALUES (synchro.gen_random_bytes(32));

-- Scopes every user is assigned by the default assignment.
CREATE TABLE synchro.shared_scope (
    scope         text PRIMARY KEY CHECK (scope <> '' AND length(scope) <= 256),
    -- Portable: the scope's contents are the same for every user (no per-user
    -- data), so a client may keep it across a change of signed-in user.
    portable      boolean NOT NULL DEFAULT false,
    registered_at timestamptz NOT NULL DEFAULT now()
);

-- One row per client: the user it is bound to and its assigned scope set.
-- scope_set_version moves forward exactly when scope_set changes.
CREATE TABLE synchro.client (
    client_id         text PRIMARY KEY,
    user_id           text NOT NULL,
    platform          text,
    app_version       text,
    scope_set         text[] NOT NULL,
    scope_set_version bigint NOT NULL,
    connected_at      timestamptz NOT NULL DEFAULT now(),
    last_seen_at      timestamptz NOT NULL DEFAULT now()
);

-- Push idempotency: the recorded outcome of every (client_id, mutation_id),
-- written in the transaction that applied the mutation.
CREATE TABLE synchro.mutation (
    client_id   text NOT NULL,
    mutation_id text NOT NULL,
    batch_id    text,
    outcome     jsonb,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (client_id, mutation_id)
);

-- Schema manifest versions: a new version whenever the manifest hash changes.
CREATE TABLE synchro.schema_version (
    version     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    hash        text NOT NULL,
    manifest    jsonb NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);

-- Custom write policies: (user_id text, op text, table_name text, before jsonb,
-- after jsonb) RETURNS boolean, replacing the default scope policy of a table.
CREATE TABLE synchro.write_policy (
    table_id integer PRIMARY KEY REFERENCES synchro.synced_table,
    policy   regprocedure NOT NULL
);

-- +goose Down
DROP TABLE synchro.write_policy, synchro.schema_version, synchro.mutation, synchro.client,
    synchro.shared_scope, synchro.cursor_key CASCADE;
ALTER TABLE synchro.settings
    DROP COLUMN min_protocol_version CASCADE, DROP COLUMN min_app_version CASCADE, DROP COLUMN scope_assignment CASCADE;
DROP EXTENSION IF EXISTS pgcrypto;
