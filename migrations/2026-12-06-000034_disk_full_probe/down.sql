DROP FUNCTION almanac_disk_refuses_writes();
