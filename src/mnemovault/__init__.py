"""mnemovault: governed long-term memory for AI agents."""
