-- Failure policy `block` and TTL sweeps, PostgreSQL.
--
-- inbox_messages gains the status 'blocked' (a message that exhausted its attempts under a
-- block policy: no page reads it, its target waits for an operator) and the column
-- first_failed_at (when the first attempt failed, carried into dead letters).

ALTER TABLE inbox_messages ADD COLUMN first_failed_at BIGINT;
ALTER TABLE inbox_messages DROP CONSTRAINT inbox_messages_status_check;
ALTER TABLE inbox_messages ADD CONSTRAINT inbox_messages_status_check
    CHECK (status IN ('to_deliver', 'delivered', 'to_catch_up', 'blocked'));

-- Blocked targets, for operators: few rows, looked up by target.
CREATE INDEX inbox_blocked ON inbox_messages (tenant, target_kind, target_id)
    WHERE status = 'blocked';
-- Rows with a TTL not yet delivered, by expiry: a TTL sweep reads only the expired ones.
CREATE INDEX inbox_expiring ON inbox_messages (expires_at)
    WHERE expires_at IS NOT NULL AND status <> 'delivered';
-- A dead letter keeps the original row whole, its first failure time included.
ALTER TABLE dead_letters ADD COLUMN row_first_failed_at BIGINT;
-- Operators list and purge dead letters by time.
CREATE INDEX dead_letters_by_time ON dead_letters (last_attempt_at);
