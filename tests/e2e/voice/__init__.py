"""End to end voice: AgentSession apps and voice workers with real offline speech."""
