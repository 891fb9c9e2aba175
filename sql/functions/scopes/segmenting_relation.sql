-- synchro.segmenting_relation: the relations whose changes make a transaction
-- stand alone in a materialization batch (synchro.materialize_transaction), so
-- that every rule reading them is evaluated against that transaction's state,
-- not a later one's: each relation a rule reads besides its own table
-- (synchro.rule_read), and the own table of an sql rule whose membership query
-- reads its own projection (registration records "reads_own_projection"; such
-- a table has no impact query on itself, so it is not in synchro.rule_read).
CREATE OR REPLACE VIEW synchro.segmenting_relation AS
SELECT rr.relation_id FROM synchro.rule_read rr
UNION
SELECT t.relation_id FROM synchro.synced_table t
WHERE t.scope_rule ->> 'kind' = 'sql' AND (t.scope_rule ->> 'reads_own_projection')::boolean;
