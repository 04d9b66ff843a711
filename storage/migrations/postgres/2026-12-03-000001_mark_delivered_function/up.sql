-- A stage's delivered rows, marked by a function the stage commit calls. PostgreSQL plans a
-- SQL function's statement anew at every call of the statement that calls it, on the inbox
-- as it is then, so the stage commit itself can keep one prepared plan: the commit no longer
-- pays for planning its whole statement at every stage, and a plan made while the inbox was
-- small (a sequential scan: `seq = ANY(...)` is costed as ten index probes) is never kept
-- for a grown inbox. The body names `inbox_messages` unqualified: it is looked up in the
-- caller's search_path at each call, the schema whose rows the stage commits.
CREATE FUNCTION shardbox_mark_delivered(
  p_shard integer, p_seqs bigint[], p_at bigint, p_keep_until bigint
) RETURNS bigint LANGUAGE sql VOLATILE AS $$
  WITH marked AS (
    UPDATE inbox_messages SET status = 'delivered', delivered_at = p_at, keep_until = p_keep_until
    WHERE shard = p_shard AND seq = ANY(p_seqs)
    RETURNING 1
  )
  SELECT count(*) FROM marked
$$;
