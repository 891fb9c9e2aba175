-- +goose Up
-- Registry, settings and write fences: the base of the change stream (docs/change-stream.md,
-- "Registry activation and relation drift", "Write fences and opaque row versions").

-- The schema itself is created by synchroctl migrate before goose runs, because
-- goose keeps its version table in it.
CREATE SCHEMA IF NOT EXISTS synchro;

-- pg_visibility lets the fence trigger see that a row was written frozen
-- (COPY ... FREEZE), which the fence must refuse (SQLSTATE 0A000).
CREATE EXTENSION IF NOT EXISTS pg_visibility WITH SCHEMA synchro;

-- One row: names this database's capture objects use.
CREATE TABLE synchro.settings (
    singleton        boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    publication_name name NOT NULL DEFAULT 'synchro'
);
INSERT INTO synchro.settings DEFAULT VALUES;

-- Every registry change creates one durable, validated generation. The worker
-- activates it where its transactional logical message appears in source order.
CREATE TABLE synchro.registry_generation (
    generation   bigint PRIMARY KEY,
    reason       text NOT NULL,
    created_by   name NOT NULL DEFAULT session_user,
    created_at   timestamptz NOT NULL DEFAULT now(),
    validated_at timestamptz NOT NULL DEFAULT now()
);
-- Generation 0 is the empty registry every stream starts from.
INSERT INTO synchro.registry_generation (generation, reason) VALUES (0, 'empty registry');

-- A registered physical relation: synced table or capture-only dependency.
-- relation_id and the qualified identity (schema, name, OID) are immutable.
CREATE TABLE synchro.relation (
    relation_id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    registration_kind text NOT NULL CHECK (registration_kind IN ('synced', 'capture_dependency')),
    schema_name       name NOT NULL,
    relation_name     name NOT NULL,
    relation_oid      oid NOT NULL UNIQUE,
    key_column        name NOT NULL,
    key_type          text NOT NULL CHECK (key_type IN ('string', 'int', 'int64')),
    -- Columns captured into the projection (always includes the key).
    columns           name[] NOT NULL,
    generation        bigint NOT NULL REFERENCES synchro.registry_generation,
    registered_at     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (schema_name, relation_name)
);

-- A synced relation's client-visible registration.
CREATE TABLE synchro.synced_table (
    table_id          integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    relation_id       bigint NOT NULL UNIQUE REFERENCES synchro.relation,
    name              text NOT NULL UNIQUE,
    scope_rule        jsonb NOT NULL,
    sync_columns      name[] NOT NULL,
    push_policy       text NOT NULL CHECK (push_policy IN ('enabled', 'read_only')),
    updated_at_column name,
    deleted_at_column name,
    -- The arguments of the registering call, so that repeating it is a no-op.
    registered_input  jsonb NOT NULL
);

-- The projected state of every registered relation: the row image (registered
-- columns) as of the last materialized source transaction. Only materialization
-- writes it; scope rules are evaluated over it, never over live rows.
CREATE TABLE synchro.projection (
    relation_id bigint NOT NULL REFERENCES synchro.relation,
    key         text NOT NULL,
    image       jsonb NOT NULL,
    PRIMARY KEY (relation_id, key)
);

-- The canonical identity reservation of one row: its current opaque version.
-- Fence triggers and push conflict checks lock this row, so a direct write and a
-- push cannot both advance one prior version. fence_xid and fence_ctid (the tuple
-- the last fence left; NULL after a delete) are the order state of the fence's
-- nested-statement check.
CREATE TABLE synchro.row_head (
    relation_id bigint NOT NULL,
    key         text NOT NULL,
    version     text NOT NULL,
    fence_xid   xid8 NOT NULL,
    fence_ctid  tid,
    PRIMARY KEY (relation_id, key)
);

-- One write fence per row operation that occurred. The WAL worker reconciles it
-- with the matching row event and records where it was materialized.
CREATE TABLE synchro.fence (
    fence_id          uuid PRIMARY KEY,
    relation_id       bigint NOT NULL,
    op                text NOT NULL CHECK (op IN ('insert', 'update', 'delete')),
    key               text NOT NULL,
    version           text NOT NULL,
    dml_ordinal       integer NOT NULL,
    xid               xid8 NOT NULL,
    client_id         text,
    mutation_id       text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    materialized_lsn  pg_lsn
);
-- The capture gate asks: does this client have an accepted fence not yet materialized?
CREATE INDEX fence_pending_by_client ON synchro.fence (client_id)
    WHERE client_id IS NOT NULL AND materialized_lsn IS NULL;

-- The installed function bundle (sql/functions), recorded by synchroctl migrate.
CREATE TABLE synchro.function_bundle (
    singleton    boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    digest       text NOT NULL,
    installed_at timestamptz NOT NULL DEFAULT now()
);

-- Operators and the HTTP service get separate roles; the bundle grants to them.
-- Roles are cluster-wide: serialize their creation across databases migrating at once.
SELECT pg_advisory_xact_lock(hashtext('synchro.roles'));
-- +goose StatementBegin
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'synchro_operator') THEN
        CREATE ROLE synchro_operator NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'synchro_service') THEN
        CREATE ROLE synchro_service NOLOGIN;
    END IF;
END $$;
-- +goose StatementEnd
GRANT USAGE ON SCHEMA synchro TO synchro_operator, synchro_service;

-- +goose Down
-- Everything of Synchro in this database goes, also what the function bundle
-- and registration made outside schema synchro: the capture publication, and
-- the triggers on registered tables (with the functions they execute). Goose's
-- version table stays (goose records this rollback in it): it waits in a schema
-- of its own while schema synchro is dropped and created again. The roles are
-- the cluster's, which other databases may use, and stay too.
-- +goose StatementBegin
DO $$ BEGIN
    EXECUTE coalesce((SELECT format('DROP PUBLICATION IF EXISTS %I', publication_name) FROM synchro.settings), '');
END $$;
-- +goose StatementEnd
CREATE SCHEMA synchro_goose_version;
ALTER TABLE IF EXISTS synchro.goose_db_version SET SCHEMA synchro_goose_version;
DROP SCHEMA synchro CASCADE;
CREATE SCHEMA synchro;
ALTER TABLE IF EXISTS synchro_goose_version.goose_db_version SET SCHEMA synchro;
DROP SCHEMA synchro_goose_version;
