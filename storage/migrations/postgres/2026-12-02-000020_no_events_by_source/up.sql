-- No index for reading one producer's stream back. A third index on `events` cost `live`
-- about 15 % of its throughput on SQLite (every handled command appends an event), for a read
-- that exists for debugging and tests (EventStore::read_source_events): that read pages
-- through the table by `seq`, the primary key, instead. Databases that built the index with
-- an earlier build of this version lose it here; on others this does nothing.
DROP INDEX IF EXISTS events_by_source;
