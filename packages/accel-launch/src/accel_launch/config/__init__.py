"""Config files: location, keys, reading and writing, defaults, and the questionnaire."""
