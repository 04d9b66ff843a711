ALTER TABLE entity_states DROP COLUMN state_version;
