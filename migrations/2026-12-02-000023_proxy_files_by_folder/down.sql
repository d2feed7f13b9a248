DROP INDEX ix_proxy_files_relative_path;
CREATE INDEX ix_proxy_files_relative_path ON proxy_files (relative_path) WHERE relative_path IS NOT NULL;
