-- Back to the first schema: blocked messages become deliverable again (attempts kept).
DROP INDEX dead_letters_by_time;
ALTER TABLE dead_letters DROP COLUMN row_first_failed_at;
DROP INDEX inbox_expiring;
DROP INDEX inbox_blocked;
UPDATE inbox_messages SET status = 'to_deliver' WHERE status = 'blocked';
ALTER TABLE inbox_messages DROP CONSTRAINT inbox_messages_status_check;
ALTER TABLE inbox_messages ADD CONSTRAINT inbox_messages_status_check
    CHECK (status IN ('to_deliver', 'delivered', 'to_catch_up'));
ALTER TABLE inbox_messages DROP COLUMN first_failed_at;
