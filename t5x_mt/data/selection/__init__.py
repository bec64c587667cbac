"""In-domain selection for gradual fine-tuning: the scorers (`scorers`: Moore-Lewis
cross-entropy difference, the domain classifier) and the folders they read and write
(`selection_pipeline`)."""
