DROP TABLE shardbox_settings;
