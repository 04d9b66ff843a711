-- The errors of a message's last failed attempts (at most 10, each cut to 2 KiB), oldest
-- first, as a JSON list of {"at", "attempt", "error"}; NULL for a row that never failed.
-- Written only by the failure UPDATEs (retry, block), cleared by a requeue; a dead letter
-- keeps its original row's, ending with the attempt that killed it (docs/failures.md).
ALTER TABLE inbox_messages ADD COLUMN error_history TEXT;
ALTER TABLE dead_letters ADD COLUMN row_error_history TEXT;
