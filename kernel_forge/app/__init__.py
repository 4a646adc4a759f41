"""The doors: the command line (click commands, option parsing, exit codes), the MCP server,
doctor, batch and what sets a run up.  The only layer that talks to users; the work is done in
the rooms below it (``authoring``, ``ci``, ``search``, ...)."""
