"""Gold: dbt models generated per upstream table and built from silver, consistent as of one TiDB ts."""
