-- Nothing to undo: a date read again is read by the rules of the Worker that reads it.
SELECT 1;
