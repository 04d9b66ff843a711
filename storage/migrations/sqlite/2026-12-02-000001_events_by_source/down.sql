DROP INDEX IF EXISTS events_by_source;
