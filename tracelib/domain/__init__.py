"""Domain knowledge independent of any format: the counter catalogue and planner, the MPI call catalogue, machine
profiles, roofline/POP metrics and uncore DRAM traffic."""
