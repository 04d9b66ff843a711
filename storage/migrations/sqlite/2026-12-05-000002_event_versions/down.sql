ALTER TABLE dead_letters DROP COLUMN payload_version;
ALTER TABLE inbox_messages DROP COLUMN payload_version;
ALTER TABLE events DROP COLUMN version;
