"""ticdc-lakehouse: TiCDC change streams from Kafka into Apache Iceberg tables."""

__version__ = "0.1.0"
