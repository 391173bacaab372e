"""`migops suggest`: the MIG geometry that serves pending demand, proposed as a change to the config repo.

model (the values), options (what each node could become, by the MIG core and the agent's planner),
solve (the choice, CP-SAT), edit (nodes.yaml's text), cluster (reading pods and nodes). Nothing here
applies anything: a proposal becomes a commit a person reviews, and the reconciler rolls it out.
"""
