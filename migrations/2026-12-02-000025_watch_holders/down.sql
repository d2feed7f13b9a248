DROP TRIGGER tr_config_watches_taken_without_holder ON config_watches;
DROP FUNCTION config_watches_new_holder();
ALTER TABLE config_watches DROP COLUMN holder;
