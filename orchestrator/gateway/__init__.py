"""The model gateway: one OpenAI-compatible endpoint per trial, recorded and bounded."""
