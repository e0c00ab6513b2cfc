"""Tests of the LiveKit room layer (alicia.agent.rooms): the room transport and the room loop."""
