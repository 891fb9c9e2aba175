-- The notes example: one application schema, notes_app, and its Synchro
-- registration, one table per scope-rule kind (see README.md beside this file).
-- `make run EXAMPLE=notes` applies it with psql after `synchroctl migrate`.
-- Applying it again changes nothing: tables are created only when missing, an
-- identical registration is a no-op, shared scope registration is idempotent and
-- the seed rows are inserted by the first application only (one that creates
-- notes_app.templates), so seed rows deleted since stay deleted.
BEGIN;

SELECT set_config('notes_app.seed', (to_regclass('notes_app.templates') IS NULL)::text, true);

CREATE SCHEMA IF NOT EXISTS notes_app;

-- Public note templates: every user gets them, nobody may push them.
CREATE TABLE IF NOT EXISTS notes_app.templates (
    id    text PRIMARY KEY,
    title text NOT NULL,
    body  text NOT NULL DEFAULT ''
);

-- A user's notebooks: the owner is a column of the row.
CREATE TABLE IF NOT EXISTS notes_app.notebooks (
    id         text PRIMARY KEY,
    owner_id   text NOT NULL,
    title      text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Pages belong to a notebook; their owner is the notebook's owner.
CREATE TABLE IF NOT EXISTS notes_app.pages (
    id          text PRIMARY KEY,
    notebook_id text NOT NULL REFERENCES notes_app.notebooks (id),
    title       text NOT NULL,
    body        text NOT NULL DEFAULT '',
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- Notes shared with a list of users, kept in note_members.
CREATE TABLE IF NOT EXISTS notes_app.shared_notes (
    id    text PRIMARY KEY,
    title text NOT NULL,
    body  text NOT NULL DEFAULT ''
);

-- A membership relation needs its own single-column primary key.
CREATE TABLE IF NOT EXISTS notes_app.note_members (
    id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    note_id text NOT NULL REFERENCES notes_app.shared_notes (id),
    user_id text NOT NULL,
    UNIQUE (note_id, user_id)
);

-- updated_at follows every change, also one a client pushes.
CREATE OR REPLACE FUNCTION notes_app.touch_updated_at() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.updated_at := now();
    RETURN NEW;
END
$$;
CREATE OR REPLACE TRIGGER touch_updated_at BEFORE UPDATE ON notes_app.notebooks
    FOR EACH ROW EXECUTE FUNCTION notes_app.touch_updated_at();
CREATE OR REPLACE TRIGGER touch_updated_at BEFORE UPDATE ON notes_app.pages
    FOR EACH ROW EXECUTE FUNCTION notes_app.touch_updated_at();

-- Registration. Order matters: notebooks is registered as a synced table before
-- pages' path rule follows it (a relation a rule reads first is registered as a
-- capture dependency, which cannot later become a synced table).

-- shared: every row is in the one scope templates_public, which the default
-- scope assignment gives every user once it is registered as a shared scope.
SELECT synchro.register_shared_scope('templates_public');
SELECT synchro.register_table('notes_app.templates',
    '{"kind":"shared","scope":"templates_public"}',
    '{"push_policy":"read_only"}');

-- column: the scope is rendered from the row's own owner_id.
SELECT synchro.register_table('notes_app.notebooks',
    '{"kind":"column","template":"user:{owner_id}"}',
    '{"updated_at_column":"updated_at"}');

-- path: follow pages.notebook_id (a foreign key to notebooks), then render the
-- template over the notebook row.
SELECT synchro.register_table('notes_app.pages',
    '{"kind":"path","path":["notebook_id"],"template":"user:{owner_id}"}',
    '{"updated_at_column":"updated_at"}');

-- members: one scope per note_members row whose note_id points at the note;
-- note_members becomes a capture dependency (captured, not synced).
SELECT synchro.register_table('notes_app.shared_notes',
    '{"kind":"members","relation":"notes_app.note_members","column":"note_id","template":"user:{user_id}"}');

-- Seed rows, on the first application only.
DO $$
BEGIN
    IF current_setting('notes_app.seed') <> 'true' THEN
        RETURN;
    END IF;
    INSERT INTO notes_app.templates (id, title, body) VALUES
        ('t-meeting', 'Meeting notes', 'Attendees:' || chr(10) || 'Agenda:' || chr(10) || 'Actions:'),
        ('t-journal', 'Daily journal', 'Today I ...'),
        ('t-todo',    'To-do list',    '- [ ] ');
    INSERT INTO notes_app.shared_notes (id, title, body) VALUES
        ('sn-welcome', 'Welcome', 'Shared with u1 and u2 through notes_app.note_members.');
    INSERT INTO notes_app.note_members (note_id, user_id) VALUES
        ('sn-welcome', 'u1'),
        ('sn-welcome', 'u2');
END
$$;

COMMIT;
