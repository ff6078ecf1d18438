"""Bounds of node-tool steps that the host side sums into a job's worst case (recipes/budget.py): one home,
imported by the node tools that wait for them and by the planner; stdlib only, no sibling imports."""

SMOKE_ANSWER_S = 300.0  # the smoke request's answer: 8 tokens, a cold engine's first request
# the whole same-answers check (proof.py): 18 greedy answers of 16 tokens on warm engines, ~7 s each
SAME_ANSWERS_S = 120.0
METRICS_S = 10.0  # one /metrics read (proofs), and every endpoint of a results.py scrape together
