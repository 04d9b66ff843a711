-- A stage's delivered rows, marked by a function the one-statement stage commit calls, so
-- that neither that statement nor this update is planned at every stage, and no plan made
-- while the inbox was small is kept for a grown inbox.
--
-- Kept prepared with the update inside, the stage commit ended up with the generic plan
-- PostgreSQL made on the new, small inbox: a sequential scan (`seq = ANY(...)` is costed as
-- ten index probes), kept while no ANALYZE ran, so every stage read the whole inbox. Planned
-- at every execution instead, the statement cost more to plan (0.55 ms) than to run.
--
-- Here the update's one plan is made with sequential scans disabled, so it probes the
-- primary key whatever the inbox's size and statistics, and it is always the generic plan,
-- so PL/pgSQL plans it once per connection. Both settings hold only while the function
-- runs. The body names `inbox_messages` unqualified: it is the table of the caller's
-- search_path, the schema whose stage commits.
CREATE FUNCTION shardbox_mark_delivered(
  p_shard integer, p_seqs bigint[], p_at bigint, p_keep_until bigint
) RETURNS bigint LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
  marked bigint;
BEGIN
  UPDATE inbox_messages
  SET status = 'delivered', delivered_at = p_at, keep_until = p_keep_until
  WHERE shard = p_shard AND seq = ANY(p_seqs);
  GET DIAGNOSTICS marked = ROW_COUNT;
  RETURN marked;
END
$$;
