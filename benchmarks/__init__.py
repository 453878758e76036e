"""netviz benchmarks: each ``bench_<topic>.py`` has ``run(quick) -> list[row]``; see __main__."""
