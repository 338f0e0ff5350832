"""LibCST behind one door: parsing, code generation, positions and the walk."""
