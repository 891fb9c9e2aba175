-- synchro.synced_row: the current version and checksum of every live synced row
-- of the active stream generation, derived from its immutable row versions (the
-- latest version of each row, unless it is a deletion).
CREATE OR REPLACE VIEW synchro.synced_row AS
SELECT v.table_id, v.key, v.version, v.checksum
FROM (SELECT DISTINCT ON (table_id, key) table_id, key, version, checksum, image
      FROM synchro.row_version
      WHERE stream_generation = (SELECT p.stream_generation FROM synchro.progress p)
      ORDER BY table_id, key, commit_lsn DESC, event_ordinal DESC) v
WHERE v.image IS NOT NULL;
