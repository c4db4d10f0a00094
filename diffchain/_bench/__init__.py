"""The benchmark suite of ``python -m diffchain bench`` (:mod:`diffchain._bench.suite`): workloads and peers."""
