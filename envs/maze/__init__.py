"""The quickstart maze env (`Maze-v0`)."""
