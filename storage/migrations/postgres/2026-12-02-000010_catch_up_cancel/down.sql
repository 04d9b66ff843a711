-- Back to the four statuses: a cancelled job is kept as completed (both are finished).
ALTER TABLE catch_ups DROP COLUMN cancel_requested_at;
UPDATE catch_ups SET status = 'completed' WHERE status = 'cancelled';
ALTER TABLE catch_ups DROP CONSTRAINT IF EXISTS catch_ups_status_check;
ALTER TABLE catch_ups ADD CONSTRAINT catch_ups_status_check
    CHECK (status IN ('started', 'in_progress', 'finalizing', 'completed'));
