-- The version of a payload type's shape each payload was written in (`Message::VERSION`):
-- readers upcast an older payload to the shape their code reads (docs/entities.md, "Evolving
-- event schemas"). Rows written before this column existed were written at version 1. An
-- event's inbox copies and its dead letter keep the event's version.
ALTER TABLE events ADD COLUMN version INTEGER NOT NULL DEFAULT 1;
ALTER TABLE inbox_messages ADD COLUMN payload_version INTEGER NOT NULL DEFAULT 1;
ALTER TABLE dead_letters ADD COLUMN payload_version INTEGER NOT NULL DEFAULT 1;
