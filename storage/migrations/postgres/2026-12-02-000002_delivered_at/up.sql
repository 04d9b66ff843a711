-- When a row was delivered. A handled command's outcome is its delivered row, kept for the
-- deduplication window (no outcome record of its own): this is the outcome's time. Rows
-- delivered before this column existed have none; their outcome records answer for them.
ALTER TABLE inbox_messages ADD COLUMN delivered_at BIGINT;
