"""Config files: where they live, their keys, reading, writing, the defaults and the questionnaire."""
