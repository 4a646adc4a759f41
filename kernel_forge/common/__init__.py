"""Plain helpers every layer may use: errors, file writes, statistics, dtypes, expressions, static text rules, child processes. Imports nothing else of kernel_forge."""
