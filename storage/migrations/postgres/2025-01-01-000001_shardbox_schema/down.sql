DROP TABLE dead_letters;
DROP TABLE catch_ups;
DROP TABLE entity_states;
DROP TABLE events;
DROP TABLE shard_sessions;
DROP TABLE inbox_messages;
