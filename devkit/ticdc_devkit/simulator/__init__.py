"""A TiCDC simulator: logical DDL/DML streams encoded byte for byte as TiCDC would, per protocol.

`model` defines the logical stream; one encoder module per protocol (`canal_json`, `open_protocol`,
`debezium`, `avro`, `simple`) turns it into Kafka messages; `encode_stream` spreads it over
partitions as a changefeed's dispatcher does.
"""
