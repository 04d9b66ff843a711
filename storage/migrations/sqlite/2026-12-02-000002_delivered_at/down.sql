ALTER TABLE inbox_messages DROP COLUMN delivered_at;
