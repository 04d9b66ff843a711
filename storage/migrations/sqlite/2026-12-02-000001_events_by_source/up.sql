-- One producer's stream in seq order (EventStore::read_source_events: an aggregate
-- instance's own events, read back for debugging and tests).
CREATE INDEX IF NOT EXISTS events_by_source ON events (tenant, source_kind, source_id, seq);
