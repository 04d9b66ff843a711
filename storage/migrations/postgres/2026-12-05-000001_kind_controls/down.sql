DROP TABLE shardbox_kind_controls;
