-- The version of its kind's state shape each framework-kept state was saved at
-- (`STATE_VERSION`): a state of an older version is upcast before it is decoded, or fails
-- with an error naming its kind, tenant, id and version (docs/entities.md, "Evolving event
-- schemas"). States saved before this column existed were saved at version 1.
ALTER TABLE entity_states ADD COLUMN state_version INTEGER NOT NULL DEFAULT 1;
