DROP TABLE failed_files;
