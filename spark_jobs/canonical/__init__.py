"""The canonical model every layer speaks: the change event (`events`) and canonical value text and types
(`values`). Pure Python at the bottom of the package: the codecs, the DDL interpreter and the Dumpling reader
all produce it, and it imports nothing of the project but its errors."""
