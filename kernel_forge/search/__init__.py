"""The optimisation loop and everything it decides: strategies, selection, feedback, prompts, reflection, retrieval and the built-in tuner's spaces."""
