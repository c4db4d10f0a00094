"""Model files: MuJoCo's MJCF export."""
