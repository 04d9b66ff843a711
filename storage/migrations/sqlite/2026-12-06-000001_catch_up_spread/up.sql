-- A catch-up over several databases: its replay's set and its end's positions (JSON, see
-- shardbox_core::storage::CatchUpSpread); NULL for a job of one database.
ALTER TABLE catch_ups ADD COLUMN spread TEXT;
