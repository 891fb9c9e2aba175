-- synchro.projection_generation: the stream generation whose projections rule
-- evaluation reads: the one materialization or a reset's baseline is building
-- (the transaction-local setting synchro.projection_generation, which they
-- set), else the active generation (synchro.progress). Projections of other
-- generations are never read.
CREATE OR REPLACE FUNCTION synchro.projection_generation()
RETURNS uuid
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(nullif(current_setting('synchro.projection_generation', true), '')::uuid,
                    (SELECT p.stream_generation FROM synchro.progress p))
$$;
