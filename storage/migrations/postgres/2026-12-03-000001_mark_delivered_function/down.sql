DROP FUNCTION shardbox_mark_delivered(integer, bigint[], bigint, bigint);
