"""Development kit: the embedded broker, the TiCDC simulator and oracle, the demo, the registry stand-in.

Nothing in the pipeline imports from here; the demo, the tests and the benchmarks do.
"""
