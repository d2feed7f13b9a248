DROP TABLE IF EXISTS schedule_periods;
