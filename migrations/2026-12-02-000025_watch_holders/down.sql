ALTER TABLE config_watches DROP COLUMN holder;
