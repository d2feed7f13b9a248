-- The proxy sweep reads the proxy rows one folder of the proxy root at a time (`<config id>/<2 hex>/`, issue #26
-- item 4 with #24 item 1: the check that proxy files are whole moved from the crawl into the daily sweep, in
-- bounded memory). A folder is a range of paths in byte order, which only the "C" collation gives whatever the
-- database's locale: so the index on the path is in that collation, and the sweep's statements (the range, and
-- the lookup of single paths) compare in it too.
DROP INDEX ix_proxy_files_relative_path;
CREATE INDEX ix_proxy_files_relative_path ON proxy_files (relative_path COLLATE "C") WHERE relative_path IS NOT NULL;
