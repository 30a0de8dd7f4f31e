"""Frame statistics, what may be compared, the decision model and the comparison."""
