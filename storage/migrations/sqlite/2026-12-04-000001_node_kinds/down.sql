ALTER TABLE shardbox_nodes DROP COLUMN kinds;
