"""The multi-rank probes' table: every rank's median ms of each measure, printed by rank 0."""


def print_rank_table(world, rows: dict, title: str) -> None:
    """Gather ``rows`` (measure -> ms) from every rank; rank 0 prints ``title`` and a Markdown table."""
    every = world.allgather(rows, what="rows")
    if world.rank != 0:
        return
    w = world.size
    print(title)
    print("| measure | " + " | ".join(f"rank {r} ms" for r in range(w)) + " |")
    print("|---|" + "---|" * w)
    for name in rows:
        print(f"| {name} | " + " | ".join(f"{every[r][name]:.3f}" for r in range(w)) + " |", flush=True)
