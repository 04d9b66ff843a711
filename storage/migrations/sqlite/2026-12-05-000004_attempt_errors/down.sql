ALTER TABLE dead_letters DROP COLUMN row_error_history;
ALTER TABLE inbox_messages DROP COLUMN error_history;
