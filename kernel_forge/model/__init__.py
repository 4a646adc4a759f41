"""What a task is: the manifest, the candidate kernel, its signature and launch, inputs, tolerances, verdicts and dispatch rules. Files only; no GPU, no network."""
