-- Catch-up cancel: the status `cancelled` and the operator's request time.
ALTER TABLE catch_ups DROP CONSTRAINT IF EXISTS catch_ups_status_check;
ALTER TABLE catch_ups ADD CONSTRAINT catch_ups_status_check
    CHECK (status IN ('started', 'in_progress', 'finalizing', 'completed', 'cancelled'));
-- When an operator asked to cancel the job; written only by that request.
ALTER TABLE catch_ups ADD COLUMN cancel_requested_at BIGINT;
