"""Files: the model format (:mod:`.format`, JSON with a schema in ``schema/``), trajectories (:mod:`.trajectory`) and
MuJoCo's MJCF export (:mod:`.mjcf`)."""
