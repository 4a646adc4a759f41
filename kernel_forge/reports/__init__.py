"""What a reader sees: summary.json, report.md and its plots, JUnit, the evaluation table."""
