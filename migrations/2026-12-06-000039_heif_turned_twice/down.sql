-- Nothing to undo: proxies made again are the same files or better ones.
SELECT 1;
