"""Data desensitisation: finding personal data in datasets (Presidio) and writing scrubbed copies (docs/privacy.md)."""
