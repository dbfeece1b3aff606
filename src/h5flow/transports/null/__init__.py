"""The null transport: producer and analysis in one process, each rank's analysis reading the blocks its own
producer rank wrote, in place (no copy, no file, no socket). ``h5flow bench transit`` measures every other
transport against it; docs/CONFIG.md, "null"."""
