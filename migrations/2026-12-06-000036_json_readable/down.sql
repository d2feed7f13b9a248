-- Gives the work items' JSON columns back their type and drops the rule (migration 000036). Values it kept as text
-- stay as they are.

ALTER TABLE work_items
    ALTER COLUMN payload TYPE jsonb,
    ALTER COLUMN progress TYPE jsonb,
    ALTER COLUMN result TYPE jsonb;
DROP DOMAIN almanac_json;
DROP FUNCTION almanac_json_readable(jsonb);
