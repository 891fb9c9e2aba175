-- synchro.missing_image_base: raises data_corrupted (XX001) for a row image of
-- relation rid that leaves out unchanged out-of-line (TOAST) values but has no
-- projection to complete over: the row was never captured before (it predates the
-- relation's registration, or came with an attached partition). Completing it over
-- nothing would store and publish the row without those columns; the transaction
-- is quarantined instead (docs/change-stream.md: what cannot be materialized blocks). Called by
-- synchro.materialize_segment only where the base is missing.
CREATE OR REPLACE FUNCTION synchro.missing_image_base(rid bigint)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'synchro: a changed row of relation % left unchanged out-of-line values out of its image and has no projection to complete them from (a row written before registration?)', rid
        USING ERRCODE = 'data_corrupted';
END
$$;
