"""Files: the model format (:mod:`.format`, JSON with a schema in ``schema/``) and trajectories (:mod:`.trajectory`)."""
