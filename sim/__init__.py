"""Flow-level (fluid) simulator of a big switch."""
