"""What the numbers say: frame statistics, which traces may be compared, the decision model and the
comparison.
"""
