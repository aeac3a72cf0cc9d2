"""C sources of the ceiling probes (iobench, membench), shipped as package data and built by
orchestrator/tools/probe_build.py for the device's ABI."""
