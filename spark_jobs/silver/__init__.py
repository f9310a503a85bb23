"""Silver: bronze decoded by the codecs into one deduplicated change log, DDL history and watermarks."""
