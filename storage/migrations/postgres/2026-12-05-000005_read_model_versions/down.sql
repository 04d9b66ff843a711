ALTER TABLE catch_ups DROP COLUMN until_seq;
ALTER TABLE catch_ups DROP COLUMN version_of;
DROP TABLE shardbox_read_model_versions;
