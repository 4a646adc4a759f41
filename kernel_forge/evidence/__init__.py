"""The run folder (runs/run-NNN/): its files, schemas and the environment fingerprint."""
