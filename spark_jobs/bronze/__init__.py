"""Bronze: raw Kafka records landed into Iceberg exactly once (plan on the driver, read on executors)."""
