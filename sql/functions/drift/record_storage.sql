-- synchro.record_storage: records the storage (pg_class.relfilenode) and the
-- registered columns' pg_attribute xmins (synchro.column_xmins) of registered
-- relation rid (by default: of every one) and of its recorded partitions, where
-- recording them cannot hide a rewrite: a table not recorded yet (no storage
-- recorded), or one where only one of the two changed since recorded (new
-- storage alone: VACUUM FULL, CLUSTER, a type change of an unregistered column;
-- a registered column's definition alone: SET DEFAULT, SET NOT NULL, a wider
-- type modifier). Where both changed, ALTER COLUMN ... TYPE ... USING may have
-- rewritten registered values without row events: that is catalog drift
-- (synchro.catalog_drift), and it stays until overwrite records them anyway
-- (synchro.accept_rewrite, the owner's attestation), whatever DDL wrote either
-- row again meanwhile. Returns how many tables it recorded. Registration and
-- synchro.guard_partitions record the tables they add; the worker records the
-- harmless changes at each catalog check that finds no drift, so that both
-- harmless kinds happening between two checks (a SET DEFAULT and a VACUUM FULL
-- while the worker is down) read as a rewrite until accepted.
CREATE OR REPLACE FUNCTION synchro.record_storage(rid bigint DEFAULT NULL, overwrite boolean DEFAULT false)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    tables integer;
    parts integer;
BEGIN
    UPDATE synchro.relation r SET relfilenode = cur.relfilenode, column_xmins = cur.xmins
    FROM (SELECT r2.relation_id, c.relfilenode, synchro.column_xmins(c.oid, r2.columns) AS xmins
          FROM synchro.relation r2 JOIN pg_class c ON c.oid = r2.relation_oid
          WHERE rid IS NULL OR r2.relation_id = rid) cur
    WHERE r.relation_id = cur.relation_id
      AND (r.relfilenode, r.column_xmins) IS DISTINCT FROM (cur.relfilenode, cur.xmins)
      AND (overwrite OR r.relfilenode IS NULL OR r.relfilenode = cur.relfilenode
           OR r.column_xmins IS NOT DISTINCT FROM cur.xmins);
    GET DIAGNOSTICS tables = ROW_COUNT;
    UPDATE synchro.relation_partition rp SET relfilenode = cur.relfilenode, column_xmins = cur.xmins
    FROM (SELECT rp2.relation_id, rp2.partition_oid, c.relfilenode, synchro.column_xmins(c.oid, r.columns) AS xmins
          FROM synchro.relation_partition rp2
          JOIN synchro.relation r ON r.relation_id = rp2.relation_id
          JOIN pg_class c ON c.oid = rp2.partition_oid
          WHERE rid IS NULL OR rp2.relation_id = rid) cur
    WHERE rp.relation_id = cur.relation_id AND rp.partition_oid = cur.partition_oid
      AND (rp.relfilenode, rp.column_xmins) IS DISTINCT FROM (cur.relfilenode, cur.xmins)
      AND (overwrite OR rp.relfilenode IS NULL OR rp.relfilenode = cur.relfilenode
           OR rp.column_xmins IS NOT DISTINCT FROM cur.xmins);
    GET DIAGNOSTICS parts = ROW_COUNT;
    RETURN tables + parts;
END
$$;
